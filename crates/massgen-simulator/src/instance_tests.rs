//! The instance generator's unit tests (exact instances; `tests/it/demo_tool_choice.rs`
//! checks a wider set against a real JSON Schema validator).
#![allow(clippy::unwrap_used)] // a panic is the test failure

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

#[test]
fn tool_arguments_nest_objects_arrays_enums_and_integers() {
    let schema = json!({"type": "object", "properties": {
        "order": {"type": "object", "properties": {
            "id": {"type": "integer", "minimum": 10},
            "status": {"type": "string", "enum": ["open", "closed"]},
            "lines": {"type": "array", "minItems": 1, "items": {"type": "object",
                "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "exclusiveMinimum": 0}},
                "required": ["sku", "qty"]}}},
            "required": ["id", "status", "lines"]},
        "note": {"type": "string"}},
        "required": ["order"], "additionalProperties": false});
    assert_eq!(
        arguments(&schema, false),
        json!({"order": {"id": 10, "status": "open", "lines": [{"sku": "simulated", "qty": 1}]}})
    );
    // Every property at the top level (the `client_tool` policy), required ones below.
    assert_eq!(arguments(&schema, true)["note"], "simulated");
    // No parameters, or a schema that is not an object: still an object of arguments.
    assert_eq!(arguments(&Value::Null, false), json!({}));
    assert_eq!(arguments(&json!({"type": "string"}), false), json!({}));
}

#[test]
fn numbers_stay_within_their_bounds() {
    let n = |schema: Value| instance(&schema);
    assert_eq!(n(json!({"type": "integer"})), json!(1));
    assert_eq!(n(json!({"type": "integer", "maximum": -5})), json!(-5));
    assert_eq!(
        n(json!({"type": "integer", "exclusiveMaximum": 0})),
        json!(-1)
    );
    assert_eq!(n(json!({"type": "integer", "minimum": 2.5})), json!(3));
    assert_eq!(
        n(json!({"type": "integer", "exclusiveMinimum": 7})),
        json!(8)
    );
    // Draft 4's boolean exclusiveness.
    assert_eq!(
        n(json!({"type": "integer", "minimum": 7, "exclusiveMinimum": true})),
        json!(8)
    );
    assert_eq!(
        n(json!({"type": "integer", "minimum": 1, "multipleOf": 5})),
        json!(5)
    );
    assert_eq!(
        n(json!({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 0.5})),
        json!(0.25)
    );
    assert_eq!(n(json!({"type": "number", "minimum": 0.5})), json!(0.5));
    assert_eq!(n(json!({"type": "INTEGER"})), json!(1));
}

#[test]
fn strings_keep_length_and_format() {
    let s = |schema: Value| instance(&schema);
    assert_eq!(s(json!({"type": "string", "maxLength": 3})), "sim");
    assert_eq!(s(json!({"type": "string", "minLength": 10})), "simulatedx");
    assert_eq!(
        s(json!({"type": "string", "format": "date-time"})),
        "2026-01-01T00:00:00Z"
    );
    assert_eq!(
        s(json!({"type": "string", "format": "email"})),
        "sim@example.com"
    );
    assert_eq!(
        s(json!({"type": "string", "format": "uuid"})),
        "00000000-0000-4000-8000-000000000000"
    );
    assert_eq!(s(json!({"format": "ipv4"})), "192.0.2.1");
}

#[test]
fn unique_items_differ() {
    let schema = json!({"type": "array", "minItems": 3, "uniqueItems": true, "items": {"type": "string", "maxLength": 4}});
    assert_eq!(instance(&schema), json!(["simu", "sim1", "sim2"]));
    let schema =
        json!({"type": "array", "minItems": 2, "uniqueItems": true, "items": {"enum": ["x", "y"]}});
    assert_eq!(instance(&schema), json!(["x", "y"]));
    let schema = json!({"type": "array", "minItems": 2, "uniqueItems": true,
        "items": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}});
    assert_eq!(instance(&schema), json!([{"n": 1}, {"n": 2}]));
}

#[test]
fn combinators_merge_with_their_siblings() {
    // `anyOf` beside properties keeps both the outer and the branch's requirements.
    let schema = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
        "required": ["a"], "anyOf": [{"required": ["b"]}, {"required": ["c"]}]});
    assert_eq!(instance(&schema), json!({"a": "simulated", "b": 1}));
    // `allOf` of non-object parts merges the schemas, not the instances.
    let schema = json!({"allOf": [{"type": "string"}, {"minLength": 12}]});
    assert_eq!(instance(&schema), json!("simulatedxxx"));
    let schema = json!({"allOf": [
        {"type": "object", "properties": {"x": {"type": "integer", "minimum": 2}}, "required": ["x"]},
        {"properties": {"x": {"maximum": 9}, "y": {"const": true}}, "required": ["y"]}]});
    assert_eq!(instance(&schema), json!({"x": 2, "y": true}));
    // `$ref` with siblings (2020-12), and to the root.
    let schema = json!({"$defs": {"P": {"type": "object", "properties": {"p": {"type": "boolean"}}, "required": ["p"]}},
        "$ref": "#/$defs/P", "properties": {"q": {"type": "null"}}, "required": ["q"]});
    assert_eq!(instance(&schema), json!({"p": true, "q": null}));
    // Tuples.
    let schema = json!({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2});
    assert_eq!(instance(&schema), json!([1, "simulated"]));
}

#[test]
fn huge_and_cyclic_schemas_end() {
    // Every level requires eight copies of itself: exponential without the node budget.
    let mut required = Vec::new();
    let mut properties = Map::new();
    for i in 0..8 {
        required.push(json!(format!("k{i}")));
        properties.insert(format!("k{i}"), json!({"$ref": "#"}));
    }
    let schema = json!({"type": "object", "properties": properties, "required": required});
    let started = std::time::Instant::now();
    let _ = instance(&schema);
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    let cyclic = json!({"$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"});
    let _ = instance(&cyclic);
    let deep_all_of = json!({"$defs": {"A": {"allOf": [{"$ref": "#/$defs/A"}, {"$ref": "#/$defs/A"}]}},
        "$ref": "#/$defs/A"});
    let _ = instance(&deep_all_of);
}
