//! The fields every door's body shares, as one serde-derived struct: the `massgen`
//! extension object (`{"massgen": {"deliberation": …, "voting_quorum": …}}`, the same on
//! every door), `temperature`, `top_p` and `seed`, and the door's bounds on the answer
//! (max tokens and stop sequences, which each door names its own way: its `B`). Each
//! field's check is its deserializer, so a body that reads is a valid one, and a fault is
//! the field's own 400 ([`json::fault`]): its message, its `param` (`massgen.models`) and
//! its code.

use massgen_core::coordination::Quorum;
use massgen_core::provider::Sampling;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::{max_cost, quorum, type_error, unsupported};
use crate::app::Overrides;
use crate::config::DeliberationFormat;
use crate::server::doors::json::fault;
use crate::server::doors::narrate::Deliberation;
use crate::server::error::ApiError;

/// The fields every door shares; `B`, the door's bounds on the answer, is read from the
/// same body beside them (see [`WithShared`](super::WithShared)).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Shared<B> {
    #[serde(deserialize_with = "massgen")]
    pub massgen: Massgen,
    /// From 0 to 2: used only where the operator lets requests set it (see
    /// `session::open`), but checked always, as are `top_p` and `seed`.
    #[serde(deserialize_with = "temperature")]
    pub temperature: Option<f64>,
    /// From 0 to 1.
    #[serde(deserialize_with = "top_p")]
    pub top_p: Option<f64>,
    #[serde(deserialize_with = "seed")]
    pub seed: Option<i64>,
    #[serde(skip)]
    pub bounds: B,
}

impl<B> Shared<B> {
    pub fn sampling(&self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            seed: self.seed,
        }
    }
}

/// The `massgen` extension object.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Massgen {
    /// How much of the deliberation the client sees.
    #[serde(deserialize_with = "deliberation")]
    pub deliberation: Deliberation,
    /// Where the deliberation goes; `None` when not sent.
    #[serde(deserialize_with = "deliberation_format")]
    pub deliberation_format: Option<DeliberationFormat>,
    #[serde(deserialize_with = "voting_quorum")]
    pub voting_quorum: Option<Quorum>,
    /// A number of USD above 0.
    #[serde(deserialize_with = "max_cost_usd")]
    pub max_cost_usd: Option<f64>,
    /// 1 to [`MAX_REQUEST_MODELS`] `provider/model` strings (a model may repeat: several
    /// agents of it). Whether the server allows them is checked later.
    #[serde(deserialize_with = "models")]
    pub models: Vec<String>,
}

impl Massgen {
    /// The fields that override the panel's orchestrator options.
    pub fn overrides(&self) -> Overrides {
        Overrides {
            voting_quorum: self.voting_quorum,
            max_cost_usd: self.max_cost_usd,
            models: self.models.clone(),
            ..Overrides::default()
        }
    }

    /// `deliberation` on a door with a native place for reasoning (`native`, e.g. the
    /// Responses API's reasoning items): `deliberation_format` `reasoning` is that place,
    /// `none` hides the deliberation, and `think_tags` is refused: tags in the answer text
    /// would duplicate what the native items carry and corrupt the answer for clients that
    /// show those items.
    pub fn native_deliberation(&self, native: &str) -> Result<Deliberation, ApiError> {
        match self.deliberation_format {
            None | Some(DeliberationFormat::Reasoning) => Ok(self.deliberation),
            Some(DeliberationFormat::None) => Ok(Deliberation::Off),
            Some(DeliberationFormat::ThinkTags) => Err(unsupported(
                "massgen.deliberation_format",
                &format!(
                    "'massgen.deliberation_format' \"think_tags\" is for Chat Completions only: this API carries the deliberation in {native}; use \"reasoning\" (the default) or \"none\""
                ),
            )),
        }
    }
}

/// A field's value; `null` is an absent field.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Value>, D::Error> {
    Ok(Option::<Value>::deserialize(deserializer)?.filter(|v| !v.is_null()))
}

/// A field read from its value by `check`.
fn checked<'de, D: Deserializer<'de>, T>(
    deserializer: D,
    check: impl FnOnce(&Value) -> Result<T, ApiError>,
) -> Result<Option<T>, D::Error> {
    present(deserializer)?
        .map(|v| check(&v).map_err(fault))
        .transpose()
}

/// The object's fields are checked by [`Massgen`]'s; an array, read by position by a
/// derived struct, is a wrong type here.
fn massgen<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Massgen, D::Error> {
    match present(deserializer)? {
        None => Ok(Massgen::default()),
        Some(object @ Value::Object(_)) => Massgen::deserialize(object).map_err(D::Error::custom),
        Some(_) => Err(fault(type_error("massgen", "an object"))),
    }
}

fn temperature<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    checked(deserializer, |v| fraction(v, "temperature", 2.0))
}

fn top_p<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    checked(deserializer, |v| fraction(v, "top_p", 1.0))
}

/// A number from 0 to `max`.
fn fraction(value: &Value, key: &'static str, max: f64) -> Result<f64, ApiError> {
    value
        .as_f64()
        .filter(|n| (0.0..=max).contains(n))
        .ok_or_else(|| {
            ApiError::invalid(
                format!("'{key}' must be a number from 0 to {max}"),
                Some(key),
                "invalid_value",
            )
        })
}

fn seed<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    checked(deserializer, |v| {
        v.as_i64().ok_or_else(|| type_error("seed", "an integer"))
    })
}

fn deliberation<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Deliberation, D::Error> {
    let deliberation = checked(deserializer, |v| match v.as_str() {
        Some("summary") => Ok(Deliberation::Summary),
        Some("full") => Ok(Deliberation::Full),
        Some("off") => Ok(Deliberation::Off),
        _ => Err(ApiError::invalid(
            "'massgen.deliberation' must be one of \"summary\", \"full\", \"off\"",
            Some("massgen.deliberation"),
            "invalid_value",
        )),
    })?;
    Ok(deliberation.unwrap_or_default())
}

fn deliberation_format<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<DeliberationFormat>, D::Error> {
    checked(deserializer, |v| {
        v.as_str()
            .and_then(DeliberationFormat::from_name)
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
    })
}

fn voting_quorum<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Quorum>, D::Error> {
    checked(deserializer, |v| quorum(v, "massgen.voting_quorum"))
}

fn max_cost_usd<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<f64>, D::Error> {
    checked(deserializer, |v| max_cost(v, "massgen.max_cost_usd"))
}

/// Most agents a request may ask for with `massgen.models`.
pub const MAX_REQUEST_MODELS: usize = 8;
/// Longest `provider/model` entry.
const MAX_MODEL_CHARS: usize = 200;

fn models<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    Ok(checked(deserializer, model_list)?.unwrap_or_default())
}

fn model_list(value: &Value) -> Result<Vec<String>, ApiError> {
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

/// A door's max-token field `key` (for its `B`'s deserializer): a whole number of at least
/// 1, `null` as absent.
pub fn count<'de, D: Deserializer<'de>>(
    deserializer: D,
    key: &'static str,
) -> Result<Option<u64>, D::Error> {
    checked(deserializer, |v| count_of(v, key))
}

/// [`count`] of a value already read (a field read only when another is absent).
pub fn count_of(value: &Value, key: &'static str) -> Result<u64, ApiError> {
    value.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
        ApiError::invalid(
            format!("'{key}' must be a whole number of at least 1"),
            Some(key),
            "invalid_value",
        )
    })
}

/// Longest stop sequence (each is searched in the streamed answer).
const MAX_STOP_CHARS: usize = 256;

/// A door's stop sequences under `key` (for its `B`'s deserializer): a list of at most
/// `max` non-empty strings of at most 256 characters; with `one_string`, a lone string too
/// (Chat Completions' `stop`).
pub fn stops<'de, D: Deserializer<'de>>(
    deserializer: D,
    key: &'static str,
    max: usize,
    one_string: bool,
) -> Result<Vec<String>, D::Error> {
    Ok(checked(deserializer, |v| stop_list(v, key, max, one_string))?.unwrap_or_default())
}

fn stop_list(
    value: &Value,
    key: &'static str,
    max: usize,
    one_string: bool,
) -> Result<Vec<String>, ApiError> {
    let one;
    let list = match value {
        Value::Array(l) => l.as_slice(),
        s @ Value::String(_) if one_string => {
            one = [s.clone()];
            &one[..]
        }
        _ if one_string => return Err(type_error(key, "a string or an array of strings")),
        _ => return Err(type_error(key, "an array of strings")),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::doors::json;
    use massgen_core::coordination::OrchestratorOptions;
    use serde_json::json;

    fn shared(v: Value) -> Result<Shared<()>, ApiError> {
        json::read(v.to_string().as_bytes())
    }

    fn overrides_of(v: Value) -> Result<Overrides, ApiError> {
        shared(v).map(|s| s.massgen.overrides())
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

    /// Each check's 400 is the field's own: its message as worded, its name as `param`.
    #[test]
    fn a_fault_is_the_fields_own_400() {
        for (body, param, code, message) in [
            (
                json!({"temperature": 3}),
                "temperature",
                "invalid_value",
                "'temperature' must be a number from 0 to 2",
            ),
            (
                json!({"top_p": -0.1}),
                "top_p",
                "invalid_value",
                "'top_p' must be a number from 0 to 1",
            ),
            (
                json!({"seed": "7"}),
                "seed",
                "invalid_type",
                "'seed' must be an integer",
            ),
            (
                json!({"massgen": [1]}),
                "massgen",
                "invalid_type",
                "'massgen' must be an object",
            ),
            (
                json!({"massgen": {"deliberation": 5}}),
                "massgen.deliberation",
                "invalid_value",
                "'massgen.deliberation' must be one of \"summary\", \"full\", \"off\"",
            ),
            (
                json!({"massgen": {"deliberation_format": "tags"}}),
                "massgen.deliberation_format",
                "invalid_value",
                "'massgen.deliberation_format' must be one of \"reasoning\", \"think_tags\", \"none\"",
            ),
            (
                json!({"massgen": {"models": []}}),
                "massgen.models",
                "invalid_value",
                "'massgen.models' must name 1 to 8 models, got 0",
            ),
            (
                json!({"massgen": {"models": ["at line 1 column 2"]}}),
                "massgen.models",
                "invalid_value",
                "each entry of 'massgen.models' must be \"provider/model\" (at most 200 characters), got \"at line 1 column 2\"",
            ),
        ] {
            let e = shared(body.clone()).unwrap_err();
            assert_eq!(
                (e.param(), e.code(), e.message().as_str()),
                (Some(param), code, message),
                "{body}"
            );
        }
    }

    #[test]
    fn null_is_absent_and_values_are_read() {
        let s = shared(json!({"temperature": null, "top_p": 0.5, "seed": 7,
            "massgen": {"deliberation": "full", "deliberation_format": null,
            "models": [" openai/gpt-5 "]}}))
        .unwrap();
        assert_eq!(
            s.sampling(),
            Sampling {
                temperature: None,
                top_p: Some(0.5),
                seed: Some(7)
            }
        );
        assert_eq!(s.massgen.deliberation, Deliberation::Full);
        assert_eq!(s.massgen.deliberation_format, None);
        assert_eq!(s.massgen.models, ["openai/gpt-5"]);
        let s = shared(json!({"massgen": null})).unwrap();
        assert_eq!(s.massgen.deliberation, Deliberation::Summary);
    }

    #[test]
    fn a_native_door_refuses_think_tags() {
        let s = shared(json!({"massgen": {"deliberation_format": "think_tags"}})).unwrap();
        let e = s
            .massgen
            .native_deliberation("reasoning items")
            .unwrap_err();
        assert_eq!(
            (e.code(), e.param()),
            ("unsupported_parameter", Some("massgen.deliberation_format"))
        );
        let s = shared(json!({"massgen": {"deliberation_format": "none"}})).unwrap();
        assert_eq!(
            s.massgen.native_deliberation("x").unwrap(),
            Deliberation::Off
        );
    }
}
