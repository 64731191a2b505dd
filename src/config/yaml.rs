//! YAML text → `serde_json::Value`.
//!
//! Through libyaml's parser (`serde_norway`), the one PyYAML also builds on, so a file
//! MassGen reads is read here alike: a multi-line flow list whose closing `]` sits at its
//! key's indentation, common in MassGen's examples, is valid (yaml-rust2 rejects it). YAML
//! integers stay JSON integers, floats floats, lists arrays, key case as written (tested in
//! tests/it/config.rs).

use serde_json::{Map, Value};

/// Parses one YAML document whose top level is a mapping (an empty document is an empty
/// mapping). The error text is the parser's (position and reason, never the file's content).
pub fn parse(yaml: &str) -> Result<Map<String, Value>, String> {
    let value: Value = if yaml.trim().is_empty() {
        Value::Null
    } else {
        serde_norway::from_str(yaml).map_err(|e| format!("invalid YAML: {e}"))?
    };
    match value {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        _ => Err("invalid YAML: the top level must be a mapping of sections".to_string()),
    }
}
