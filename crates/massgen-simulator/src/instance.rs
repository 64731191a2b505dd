//! Answers to a requested JSON format (structured output): the smallest instance a JSON
//! Schema accepts, and, on demand, one it rejects.
//!
//! The instance has every `required` property (and only those), the first `enum`/`const`
//! value, `minItems` items, strings of `minLength` (`format`s date, date-time, email, uri
//! and uuid get a valid sample), numbers at `minimum` (or `exclusiveMinimum` + 1), the
//! first branch of `anyOf`/`oneOf`, every branch of `allOf` merged, and local `$ref`s
//! (`#/$defs/…`, `#/definitions/…`) followed, to a bounded depth.
//!
//! Markers in the last user message break it: `[sim:invalid_json]` every time,
//! `[sim:invalid_json_once]` for the first such request with the same model string and
//! prompt (a corrective retry then gets a valid instance).

use serde_json::{Map, Value, json};

pub const INVALID: &str = "[sim:invalid_json]";
pub const INVALID_ONCE: &str = "[sim:invalid_json_once]";

/// How deep references and nesting are followed (a recursive schema stops there).
const MAX_DEPTH: usize = 16;

/// The JSON text answering `schema` (`None`: any JSON object), valid unless `broken`.
pub fn answer(schema: Option<&Value>, broken: bool) -> String {
    let Some(schema) = schema else {
        return if broken {
            "[simulated] not JSON".into()
        } else {
            json!({"answer": "[simulated]"}).to_string()
        };
    };
    let valid = minimal(schema, schema, 0);
    if !broken {
        return valid.to_string();
    }
    // Leave out the first required property if there is one; otherwise not JSON at all.
    let first_required = resolve(schema, schema, 0)
        .get("required")
        .and_then(|r| r.get(0))
        .and_then(Value::as_str)
        .map(str::to_string);
    match (valid, first_required) {
        (Value::Object(mut object), Some(key)) => {
            object.remove(&key);
            Value::Object(object).to_string()
        }
        _ => "[simulated] not JSON".into(),
    }
}

fn resolve<'a>(root: &'a Value, schema: &'a Value, depth: usize) -> &'a Value {
    let Some(reference) = schema.get("$ref").and_then(Value::as_str) else {
        return schema;
    };
    if depth >= MAX_DEPTH {
        return schema;
    }
    let target = reference
        .strip_prefix('#')
        .and_then(|pointer| root.pointer(pointer));
    match target {
        Some(target) => resolve(root, target, depth + 1),
        None => schema,
    }
}

fn minimal(root: &Value, schema: &Value, depth: usize) -> Value {
    let schema = resolve(root, schema, depth);
    if depth >= MAX_DEPTH {
        return Value::Null;
    }
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(first) = schema.get("enum").and_then(|e| e.get(0)) {
        return first.clone();
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(first) = schema.get(key).and_then(|b| b.get(0)) {
            return minimal(root, first, depth + 1);
        }
    }
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        let mut merged = Map::new();
        for branch in all {
            if let Value::Object(part) = minimal(root, branch, depth + 1) {
                merged.extend(part);
            }
        }
        return Value::Object(merged);
    }
    let kind = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        // The first type that is not null.
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ if schema.get("items").is_some() => "array",
        _ => "object",
    };
    let number = |integer: bool| {
        let min = schema.get("minimum").and_then(Value::as_f64);
        let exclusive = schema
            .get("exclusiveMinimum")
            .and_then(Value::as_f64)
            .map(|m| m + 1.0);
        let n = exclusive.or(min).unwrap_or(1.0);
        if integer {
            json!(n.ceil() as i64)
        } else {
            json!(n)
        }
    };
    match kind {
        "null" => Value::Null,
        "boolean" => json!(true),
        "integer" => number(true),
        "number" => number(false),
        "string" => json!(sample_string(schema)),
        "array" => {
            let count = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = schema.get("items").unwrap_or(&Value::Null);
            let items = (0..count.min(8))
                .map(|_| minimal(root, item, depth + 1))
                .collect();
            Value::Array(items)
        }
        _ => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let mut object = Map::new();
            for key in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let property = properties.and_then(|p| p.get(key)).unwrap_or(&Value::Null);
                object.insert(key.to_string(), minimal(root, property, depth + 1));
            }
            Value::Object(object)
        }
    }
}

fn sample_string(schema: &Value) -> String {
    let sample = match schema.get("format").and_then(Value::as_str) {
        Some("date-time") => "2026-01-01T00:00:00Z",
        Some("date") => "2026-01-01",
        Some("time") => "00:00:00Z",
        Some("email") => "sim@example.com",
        Some("uri" | "url") => "https://example.com/",
        Some("uuid") => "00000000-0000-4000-8000-000000000000",
        _ => "simulated",
    };
    let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
    let mut s = sample.to_string();
    while (s.chars().count() as u64) < min.min(1024) {
        s.push('x');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_required_enums_arrays_and_refs() {
        let schema = json!({
            "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 3}},
                "required": ["n"]}},
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 12},
                "kind": {"enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "item": {"$ref": "#/$defs/Item"},
                "maybe": {"anyOf": [{"type": "null"}, {"type": "string"}]},
                "when": {"type": ["null", "string"], "format": "date"},
                "skipped": {"type": "string"}
            },
            "required": ["name", "kind", "tags", "item", "maybe", "when"]
        });
        let v: Value = serde_json::from_str(&answer(Some(&schema), false)).unwrap();
        assert_eq!(
            v,
            json!({"name": "simulatedxxx", "kind": "a", "tags": ["simulated", "simulated"],
                "item": {"n": 3}, "maybe": null, "when": "2026-01-01"})
        );
        let broken: Value = serde_json::from_str(&answer(Some(&schema), true)).unwrap();
        assert!(broken.get("name").is_none() && broken.get("kind").is_some());
        assert_eq!(
            answer(Some(&json!({"type": "object"})), true),
            "[simulated] not JSON"
        );
        assert!(answer(None, false).starts_with('{'));
        // A recursive schema ends.
        let recursive = json!({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}},
            "required": ["next"]}}, "$ref": "#/$defs/N"});
        assert!(answer(Some(&recursive), false).starts_with("{\"next\""));
    }
}
