//! YAML text → `serde_json::Value`, through the `config` crate.
//!
//! We read the file with `config`'s YAML source but skip its `Config` builder: the builder
//! treats top-level keys as path expressions (`a.b`, `x[0]`) and merges sources, which a panel
//! file does not want. Deserializing each `config::Value` into `serde_json::Value` keeps YAML
//! integers as JSON integers, floats as floats, lists as arrays and key case as written
//! (tested in tests/it/config.rs).

use config::{File, FileFormat, Source};
use serde_json::{Map, Value};

/// Parses one YAML document whose top level is a mapping. The error text is the parser's
/// (position and reason, never the file's content).
pub fn parse(yaml: &str) -> Result<Map<String, Value>, String> {
    let table = File::from_str(yaml, FileFormat::Yaml)
        .collect()
        .map_err(|e| format!("invalid YAML: {e}"))?;
    let mut out = Map::new();
    for (key, value) in table {
        let json: Value = value
            .try_deserialize()
            .map_err(|e| format!("invalid YAML value at {key}: {e}"))?;
        out.insert(key, json);
    }
    Ok(out)
}
