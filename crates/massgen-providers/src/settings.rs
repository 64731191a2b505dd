//! What a client's request asks of one call (token limit, stop sequences, sampling), put
//! over the config's values in a wire format's own spelling. Structured output formats
//! are each format's own business (see their `request.rs`).

use serde_json::{Map, Value, json};

use crate::Sampling;

/// The names one wire format gives the sampling settings; `None` where it has none.
pub(crate) struct SamplingNames {
    pub temperature: &'static str,
    pub top_p: &'static str,
    pub seed: Option<&'static str>,
}

impl SamplingNames {
    /// Chat Completions (and Gemini after its own renaming of `top_p`).
    pub const OPENAI: Self = Self {
        temperature: "temperature",
        top_p: "top_p",
        seed: Some("seed"),
    };
    /// Responses and Anthropic: no seed.
    pub const NO_SEED: Self = Self {
        temperature: "temperature",
        top_p: "top_p",
        seed: None,
    };
}

/// `max` under `key`, unless the config already asks for fewer tokens: the client may
/// lower the operator's limit, never raise it.
pub(crate) fn cap_tokens(body: &mut Map<String, Value>, key: &str, max: Option<u64>) {
    let Some(max) = max else {
        return;
    };
    let configured = body.get(key).and_then(Value::as_u64);
    body.insert(
        key.to_owned(),
        json!(configured.map_or(max, |c| c.min(max))),
    );
}

/// The request's sampling settings over the config's.
pub(crate) fn put_sampling(
    body: &mut Map<String, Value>,
    sampling: &Sampling,
    names: &SamplingNames,
) {
    if let Some(t) = sampling.temperature {
        body.insert(names.temperature.to_owned(), json!(t));
    }
    if let Some(p) = sampling.top_p {
        body.insert(names.top_p.to_owned(), json!(p));
    }
    if let (Some(seed), Some(key)) = (sampling.seed, names.seed) {
        body.insert(key.to_owned(), json!(seed));
    }
}

/// Whether a JSON Schema refers to other parts of itself (`$ref`): the formats with a
/// schema subset (Gemini) cannot take those.
pub(crate) fn has_refs(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.iter().any(|(k, v)| k == "$ref" || has_refs(v)),
        Value::Array(items) => items.iter().any(has_refs),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn a_request_lowers_the_configured_limit_but_never_raises_it() {
        let mut body = Map::new();
        cap_tokens(&mut body, "max_tokens", Some(100));
        assert_eq!(body["max_tokens"], 100);
        cap_tokens(&mut body, "max_tokens", Some(500));
        assert_eq!(body["max_tokens"], 100);
        cap_tokens(&mut body, "max_tokens", Some(7));
        assert_eq!(body["max_tokens"], 7);
        cap_tokens(&mut body, "max_tokens", None);
        assert_eq!(body["max_tokens"], 7);
        assert!(has_refs(&json!({"items": [{"$ref": "#/$defs/a"}]})));
        assert!(!has_refs(&json!({"type": "object"})));
    }

    /// A presentation call with a schema, a token limit, stop sequences and sampling, in
    /// each wire format's own spelling, over the config's values.
    #[test]
    fn every_format_carries_the_request_settings_natively() {
        use crate::{Message, OutputFormat, ProviderRequest};
        let schema = json!({"type": "object", "properties": {"a": {"type": "string",
            "pattern": "^x"}}, "required": ["a"], "additionalProperties": false});
        let request = ProviderRequest {
            messages: Arc::new(vec![Message::user("hi")]),
            output_format: Some(OutputFormat::JsonSchema {
                name: "thing".into(),
                description: None,
                schema: schema.clone(),
                strict: true,
            }),
            max_output_tokens: Some(50),
            stop: vec!["END".into()],
            sampling: Sampling {
                temperature: Some(0.5),
                top_p: Some(0.9),
                seed: Some(7),
            },
            ..ProviderRequest::default()
        };
        let mut params = Map::new();
        params.insert("temperature".into(), json!(1.0));
        params.insert("max_tokens".into(), json!(4000));

        let chat = crate::chat_completions::request::build_body("m", &params, &request);
        assert_eq!(
            chat["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "thing", "schema": schema, "strict": true}})
        );
        assert_eq!(
            (&chat["max_tokens"], &chat["stop"]),
            (&json!(50), &json!(["END"]))
        );
        assert_eq!(
            (&chat["temperature"], &chat["top_p"], &chat["seed"]),
            (&json!(0.5), &json!(0.9), &json!(7))
        );

        let responses = crate::responses::request::build_body("m", &params, &request);
        assert_eq!(
            responses["text"]["format"],
            json!({"type": "json_schema", "name": "thing", "schema": schema, "strict": true})
        );
        assert_eq!(responses["max_output_tokens"], 50);
        assert!(responses.get("stop").is_none() && responses.get("seed").is_none());
        assert_eq!(responses["temperature"], 0.5);

        let anthropic = crate::anthropic::request::build_body("m", &params, &request);
        assert_eq!(
            anthropic["output_config"]["format"],
            json!({"type": "json_schema", "schema": schema})
        );
        assert_eq!(
            (&anthropic["max_tokens"], &anthropic["stop_sequences"]),
            (&json!(50), &json!(["END"]))
        );
        assert!(anthropic.get("seed").is_none());

        let gemini = crate::gemini::request::build_body(&params, &request);
        let generation = &gemini["generationConfig"];
        assert_eq!(generation["responseMimeType"], "application/json");
        // Gemini's subset: `additionalProperties` and `pattern`-less keywords it rejects go.
        assert!(
            generation["responseSchema"]
                .get("additionalProperties")
                .is_none()
        );
        assert_eq!(generation["responseSchema"]["required"], json!(["a"]));
        assert_eq!(
            (&generation["maxOutputTokens"], &generation["seed"]),
            (&json!(50), &json!(7))
        );
        assert_eq!(
            (&generation["temperature"], &generation["topP"]),
            (&json!(0.5), &json!(0.9))
        );

        // JSON mode: natively where the format has it, in words only on Anthropic; a schema
        // with `$ref`s goes to Gemini as the MIME type only.
        let mut json_mode = request.clone();
        json_mode.output_format = Some(OutputFormat::JsonObject);
        let chat = crate::chat_completions::request::build_body("m", &params, &json_mode);
        assert_eq!(chat["response_format"], json!({"type": "json_object"}));
        let responses = crate::responses::request::build_body("m", &params, &json_mode);
        assert_eq!(responses["text"]["format"], json!({"type": "json_object"}));
        let anthropic = crate::anthropic::request::build_body("m", &params, &json_mode);
        assert!(anthropic.get("output_config").is_none());
        let mut refs = request;
        refs.output_format = Some(OutputFormat::JsonSchema {
            name: "r".into(),
            description: None,
            schema: json!({"$defs": {"A": {"type": "string"}}, "$ref": "#/$defs/A"}),
            strict: false,
        });
        let gemini = crate::gemini::request::build_body(&params, &refs);
        assert!(gemini["generationConfig"].get("responseSchema").is_none());
        assert_eq!(
            gemini["generationConfig"]["responseMimeType"],
            "application/json"
        );
    }
}
