//! JSON reading shared by every door's request parser: typed
//! optional fields, and the `massgen` extension (`{"massgen": {"deliberation": …,
//! "deliberation_format": …}}`), which every door accepts in the same form.

pub mod shape;

use serde_json::{Map, Value};

use massgen_core::coordination::Quorum;
use massgen_core::provider::Sampling;

use super::narrate::Deliberation;
use crate::app::Overrides;
use crate::config::DeliberationFormat;
use crate::server::error::ApiError;

/// A field whose meaning a panel cannot honour (400 `unsupported_parameter`).
pub fn unsupported(param: &'static str, message: &str) -> ApiError {
    ApiError::invalid(message, Some(param), "unsupported_parameter")
}

/// `temperature` (0 to 2), `top_p` (0 to 1) and `seed` (an integer): used only where the
/// operator lets requests set them (see `session::open`), but checked always.
pub fn sampling(obj: &Map<String, Value>) -> Result<Sampling, ApiError> {
    let number = |key: &'static str, max: f64| match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_f64().filter(|n| (0.0..=max).contains(n)) {
            Some(n) => Ok(Some(n)),
            None => Err(ApiError::invalid(
                format!("'{key}' must be a number from 0 to {max}"),
                Some(key),
                "invalid_value",
            )),
        },
    };
    let seed = match obj.get("seed") {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or_else(|| type_error("seed", "an integer"))?),
    };
    Ok(Sampling {
        temperature: number("temperature", 2.0)?,
        top_p: number("top_p", 1.0)?,
        seed,
    })
}

/// Longest stop sequence (each is searched in the streamed answer).
const MAX_STOP_CHARS: usize = 256;

/// Stop sequences under `key`: a list of at most `max` non-empty strings of at most 256
/// characters; with `one_string`, a lone string too (Chat Completions' `stop`).
pub fn stops(
    obj: &Map<String, Value>,
    key: &'static str,
    max: usize,
    one_string: bool,
) -> Result<Vec<String>, ApiError> {
    let one;
    let list = match obj.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(l)) => l.as_slice(),
        Some(s @ Value::String(_)) if one_string => {
            one = [s.clone()];
            &one[..]
        }
        Some(_) if one_string => return Err(type_error(key, "a string or an array of strings")),
        Some(_) => return Err(type_error(key, "an array of strings")),
    };
    let stops: Option<Vec<String>> = list
        .iter()
        .map(|s| {
            s.as_str()
                .filter(|s| !s.is_empty() && s.chars().count() <= MAX_STOP_CHARS)
                .map(str::to_string)
        })
        .collect();
    match stops {
        Some(stops) if stops.len() <= max => Ok(stops),
        _ => Err(ApiError::invalid(
            format!(
                "'{key}' holds at most {max} non-empty strings of at most {MAX_STOP_CHARS} characters"
            ),
            Some(key),
            "invalid_value",
        )),
    }
}

pub fn type_error(param: &'static str, expected: &str) -> ApiError {
    ApiError::invalid(
        format!("'{param}' must be {expected}"),
        Some(param),
        "invalid_type",
    )
}

/// A whole number of at least 1, when present.
pub fn optional_count(
    obj: &Map<String, Value>,
    key: &'static str,
) -> Result<Option<u64>, ApiError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64().filter(|n| *n >= 1) {
            Some(n) => Ok(Some(n)),
            None => Err(ApiError::invalid(
                format!("'{key}' must be a whole number of at least 1"),
                Some(key),
                "invalid_value",
            )),
        },
    }
}

/// A field of the `massgen` extension object.
fn massgen_field<'a>(
    obj: &'a Map<String, Value>,
    key: &str,
) -> Result<Option<&'a Value>, ApiError> {
    match obj.get("massgen") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(m)) => Ok(m.get(key).filter(|v| !v.is_null())),
        Some(_) => Err(type_error("massgen", "an object")),
    }
}

/// `massgen.deliberation`: how much of the deliberation the client sees.
pub fn deliberation(obj: &Map<String, Value>) -> Result<Deliberation, ApiError> {
    let Some(value) = massgen_field(obj, "deliberation")? else {
        return Ok(Deliberation::default());
    };
    match value.as_str() {
        Some("summary") => Ok(Deliberation::Summary),
        Some("full") => Ok(Deliberation::Full),
        Some("off") => Ok(Deliberation::Off),
        _ => Err(ApiError::invalid(
            "'massgen.deliberation' must be one of \"summary\", \"full\", \"off\"",
            Some("massgen.deliberation"),
            "invalid_value",
        )),
    }
}

/// The `massgen` fields that override the panel's orchestrator options
/// (`massgen.voting_quorum`, `massgen.max_cost_usd`).
pub fn overrides(obj: &Map<String, Value>) -> Result<Overrides, ApiError> {
    let voting_quorum = massgen_field(obj, "voting_quorum")?
        .map(|v| quorum(v, "massgen.voting_quorum"))
        .transpose()?;
    let max_cost_usd = massgen_field(obj, "max_cost_usd")?
        .map(|v| max_cost(v, "massgen.max_cost_usd"))
        .transpose()?;
    Ok(Overrides {
        voting_quorum,
        max_cost_usd,
        models: models(obj)?,
        ..Overrides::default()
    })
}

/// A voting quorum (`"all"`, `"majority"`, a number) under `param`.
pub fn quorum(value: &Value, param: &'static str) -> Result<Quorum, ApiError> {
    Quorum::parse(value)
        .map_err(|e| ApiError::invalid(format!("'{param}' {e}"), Some(param), "invalid_value"))
}

/// A cost limit under `param`: a number of USD above 0.
pub fn max_cost(value: &Value, param: &'static str) -> Result<f64, ApiError> {
    value
        .as_f64()
        .filter(|n| n.is_finite() && *n > 0.0)
        .ok_or_else(|| {
            ApiError::invalid(
                format!("'{param}' must be a number of USD above 0"),
                Some(param),
                "invalid_value",
            )
        })
}

/// Most agents a request may ask for with `massgen.models`.
pub const MAX_REQUEST_MODELS: usize = 8;
/// Longest `provider/model` entry.
const MAX_MODEL_CHARS: usize = 200;

/// `massgen.models`: 1 to [`MAX_REQUEST_MODELS`] `provider/model` strings (a model may
/// repeat: several agents of it). Whether the server allows it is checked later.
fn models(obj: &Map<String, Value>) -> Result<Vec<String>, ApiError> {
    let Some(value) = massgen_field(obj, "models")? else {
        return Ok(Vec::new());
    };
    let bad = |message: String| ApiError::invalid(message, Some("massgen.models"), "invalid_value");
    let list = value.as_array().ok_or_else(|| {
        bad("'massgen.models' must be an array of \"provider/model\" strings".into())
    })?;
    if list.is_empty() || list.len() > MAX_REQUEST_MODELS {
        return Err(bad(format!(
            "'massgen.models' must name 1 to {MAX_REQUEST_MODELS} models, got {}",
            list.len()
        )));
    }
    list.iter()
        .map(|v| {
            let entry = v.as_str().map(str::trim).unwrap_or_default();
            let shaped = entry
                .split_once('/')
                .is_some_and(|(p, m)| !p.trim().is_empty() && !m.trim().is_empty());
            if shaped && entry.chars().count() <= MAX_MODEL_CHARS {
                Ok(entry.to_string())
            } else {
                Err(bad(format!(
                    "each entry of 'massgen.models' must be \"provider/model\" (at most {MAX_MODEL_CHARS} characters), got {v}"
                )))
            }
        })
        .collect()
}

/// `massgen.deliberation_format`: where the deliberation goes; `None` when not sent.
pub fn deliberation_format(
    obj: &Map<String, Value>,
) -> Result<Option<DeliberationFormat>, ApiError> {
    let Some(value) = massgen_field(obj, "deliberation_format")? else {
        return Ok(None);
    };
    value
        .as_str()
        .and_then(DeliberationFormat::from_name)
        .map(Some)
        .ok_or_else(|| {
            ApiError::invalid(
                format!(
                    "'massgen.deliberation_format' must be one of {}",
                    DeliberationFormat::NAMES
                        .map(|n| format!("\"{n}\""))
                        .join(", ")
                ),
                Some("massgen.deliberation_format"),
                "invalid_value",
            )
        })
}

/// `massgen.deliberation` on a door with a native place for reasoning (`native`, e.g. the
/// Responses API's reasoning items): `massgen.deliberation_format` `reasoning` is that
/// place, `none` hides the deliberation, and `think_tags` is refused: tags in the answer
/// text would duplicate what the native items carry and corrupt the answer for clients
/// that show those items.
pub fn native_deliberation(
    obj: &Map<String, Value>,
    native: &str,
) -> Result<Deliberation, ApiError> {
    let deliberation = deliberation(obj)?;
    match deliberation_format(obj)? {
        None | Some(DeliberationFormat::Reasoning) => Ok(deliberation),
        Some(DeliberationFormat::None) => Ok(Deliberation::Off),
        Some(DeliberationFormat::ThinkTags) => Err(unsupported(
            "massgen.deliberation_format",
            &format!(
                "'massgen.deliberation_format' \"think_tags\" is for Chat Completions only: this API carries the deliberation in {native}; use \"reasoning\" (the default) or \"none\""
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::coordination::OrchestratorOptions;
    use serde_json::json;

    fn overrides_of(v: Value) -> Result<Overrides, ApiError> {
        match v {
            Value::Object(obj) => overrides(&obj),
            _ => unreachable!("an object"),
        }
    }

    #[test]
    fn massgen_fields_override_the_panel() {
        let o = overrides_of(json!({"massgen": {"voting_quorum": "majority"}})).unwrap();
        let mut options = OrchestratorOptions::default();
        o.apply(&mut options);
        assert_eq!(options.voting_quorum, Quorum::Majority);
        assert_eq!(overrides_of(json!({})).unwrap(), Overrides::default());
        let bad = overrides_of(json!({"massgen": {"voting_quorum": 0}})).unwrap_err();
        assert_eq!(bad.code(), "invalid_value");
        let o = overrides_of(json!({"massgen": {"max_cost_usd": 0.5}})).unwrap();
        let mut options = OrchestratorOptions {
            max_cost_usd: Some(2.0),
            ..OrchestratorOptions::default()
        };
        o.apply(&mut options);
        assert_eq!(options.max_cost_usd, Some(0.5), "the smaller wins");
        let o = overrides_of(json!({"massgen": {"max_cost_usd": 5}})).unwrap();
        o.apply(&mut options);
        assert_eq!(
            options.max_cost_usd,
            Some(0.5),
            "a request never raises the limit"
        );
        for bad in [json!(0), json!(-1), json!("1")] {
            let e = overrides_of(json!({"massgen": {"max_cost_usd": bad}})).unwrap_err();
            assert_eq!(e.param(), Some("massgen.max_cost_usd"));
        }
        let bad = overrides_of(json!({"massgen": 3})).unwrap_err();
        assert_eq!(bad.code(), "invalid_type");
    }
}
