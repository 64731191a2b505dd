//! The JSON Schema subset Gemini function declarations accept.
//!
//! Gemini rejects a whole request over one unknown schema keyword (`additionalProperties`,
//! `$schema`, `strict`, …). Rather than fail, unknown keywords are dropped, `const`
//! becomes a one-value `enum`, and a `type` list with `"null"` becomes `nullable`.

use serde_json::{Map, Value};

const KEPT: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "minItems",
    "maxItems",
    "properties",
    "required",
    "propertyOrdering",
    "minProperties",
    "maxProperties",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "default",
];

/// A copy of `schema` with only what Gemini accepts.
pub fn sanitize(schema: &Value) -> Value {
    let Value::Object(map) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in map {
        match key.as_str() {
            "properties" => {
                if let Value::Object(properties) = value {
                    let cleaned = properties
                        .iter()
                        .map(|(name, schema)| (name.clone(), sanitize(schema)))
                        .collect();
                    out.insert(key.clone(), Value::Object(cleaned));
                }
            }
            "items" => {
                out.insert(key.clone(), sanitize(value));
            }
            "anyOf" => {
                if let Value::Array(options) = value {
                    out.insert(key.clone(), options.iter().map(sanitize).collect());
                }
            }
            "type" => {
                if let Value::Array(types) = value {
                    let named: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                    if named.len() < types.len() {
                        out.insert("nullable".into(), Value::Bool(true));
                    }
                    if let Some(first) = named.first() {
                        out.insert(key.clone(), (*first).clone());
                    }
                } else {
                    out.insert(key.clone(), value.clone());
                }
            }
            "const" => {
                out.entry("enum")
                    .or_insert_with(|| Value::Array(vec![value.clone()]));
            }
            "enum" => {
                // Gemini enums are strings only.
                if let Value::Array(values) = value
                    && values.iter().all(Value::is_string)
                {
                    out.insert(key.clone(), value.clone());
                }
            }
            other if KEPT.contains(&other) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn drops_what_gemini_rejects_and_keeps_the_rest() {
        let schema = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "additionalProperties": false,
            "properties": {
                "agent_id": {"type": "string", "enum": ["agent1", "agent2"]},
                "note": {"type": ["string", "null"], "description": "d"},
                "mode": {"const": "fast"},
                "n": {"type": "integer", "enum": [1, 2], "minimum": 0},
                "tags": {"type": "array", "items": {"type": "string", "additionalProperties": false}}
            },
            "required": ["agent_id"]
        });
        assert_eq!(
            sanitize(&schema),
            json!({
                "type": "object",
                "properties": {
                    "agent_id": {"type": "string", "enum": ["agent1", "agent2"]},
                    "note": {"type": "string", "nullable": true, "description": "d"},
                    "mode": {"enum": ["fast"]},
                    "n": {"type": "integer", "minimum": 0},
                    "tags": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["agent_id"]
            })
        );
    }
}
