//! A forced `tool_choice` (a named function, `required`, Anthropic's `any`, Gemini's
//! `mode: ANY`) is obeyed: `massgen serve --demo` answers each door's forced call with a
//! call of that tool whose arguments are valid for its schema (the default structured
//! mode of pydantic-ai, LangChain, LlamaIndex and the AI SDK), and the simulator itself
//! does so in each of its wire formats, streamed and not.

use std::collections::BTreeMap;

use futures::future::join_all;
use serde_json::{Value, json};

use crate::support::{self, Setup, parse_named_sse, parse_sse, post};

/// The three doors.
#[derive(Debug, Clone, Copy)]
enum Door {
    Chat,
    Responses,
    Messages,
}

/// How the call is forced.
#[derive(Debug, Clone, Copy)]
enum Force {
    Named,
    Any,
}

fn weather_schema() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string", "description": "City name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "unit"], "additionalProperties": false})
}

/// Nested object, array of objects, enums, bounded integers, a format, a `$ref` and an
/// optional field: what pydantic and zod write for a structured answer.
fn order_schema() -> Value {
    json!({"type": "object", "$defs": {"Line": {"type": "object", "properties": {
            "sku": {"type": "string", "minLength": 3},
            "qty": {"type": "integer", "exclusiveMinimum": 0, "maximum": 99},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["gift", "fragile"]},
                "minItems": 1, "uniqueItems": true}},
            "required": ["sku", "qty", "tags"], "additionalProperties": false}},
        "properties": {
            "customer": {"type": "object", "properties": {
                "name": {"type": "string"}, "email": {"type": "string", "format": "email"},
                "tier": {"type": "string", "enum": ["gold", "silver"]}},
                "required": ["name", "email", "tier"], "additionalProperties": false},
            "lines": {"type": "array", "items": {"$ref": "#/$defs/Line"}, "minItems": 2},
            "priority": {"type": "integer", "minimum": 10, "multipleOf": 5},
            "ship_by": {"type": "string", "format": "date"},
            "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["customer", "lines", "priority", "ship_by"], "additionalProperties": false})
}

fn validator(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .unwrap_or_else(|e| panic!("schema does not compile: {e}\n{schema}"))
}

fn assert_valid(schema: &Value, instance: &Value, what: &str) {
    let errors: Vec<String> = validator(schema)
        .iter_errors(instance)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{what}: {instance} invalid: {errors:?}");
}

/// The door's request offering the one tool `name` with `schema`, forced.
fn request(door: Door, force: Force, stream: bool, name: &str, schema: &Value) -> Value {
    let question = "Fill in the tool's arguments for a sample order in Paris.";
    match door {
        Door::Chat => json!({"model": "massgen", "stream": stream,
        "messages": [{"role": "user", "content": question}],
        "tools": [{"type": "function", "function": {"name": name,
            "description": "Structured answer", "parameters": schema}}],
        "tool_choice": match force {
            Force::Named => json!({"type": "function", "function": {"name": name}}),
            Force::Any => json!("required"),
        }}),
        Door::Responses => json!({"model": "massgen", "stream": stream, "input": question,
        "tools": [{"type": "function", "name": name, "description": "Structured answer",
            "parameters": schema}],
        "tool_choice": match force {
            Force::Named => json!({"type": "function", "name": name}),
            Force::Any => json!("required"),
        }}),
        Door::Messages => json!({"model": "massgen", "max_tokens": 1024, "stream": stream,
        "messages": [{"role": "user", "content": question}],
        "tools": [{"name": name, "description": "Structured answer", "input_schema": schema}],
        "tool_choice": match force {
            Force::Named => json!({"type": "tool", "name": name}),
            Force::Any => json!({"type": "any"}),
        }}),
    }
}

fn path(door: Door) -> &'static str {
    match door {
        Door::Chat => "/v1/chat/completions",
        Door::Responses => "/v1/responses",
        Door::Messages => "/v1/messages",
    }
}

/// The calls of a door's answer: `(name, arguments)`, after checking the finish signal.
fn calls(door: Door, stream: bool, raw: &str) -> Vec<(String, Value)> {
    let parse = |s: &str| -> Value {
        serde_json::from_str(s).unwrap_or_else(|e| panic!("arguments {s:?}: {e}\n{raw}"))
    };
    match (door, stream) {
        (Door::Chat, false) => {
            let v: Value = serde_json::from_str(raw).unwrap();
            assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{raw}");
            let list = v["choices"][0]["message"]["tool_calls"].as_array();
            list.into_iter()
                .flatten()
                .map(|c| {
                    let args = c["function"]["arguments"].as_str().unwrap();
                    (c["function"]["name"].as_str().unwrap().into(), parse(args))
                })
                .collect()
        }
        (Door::Chat, true) => {
            let sse = parse_sse(raw);
            assert!(sse.done, "{raw}");
            let mut by_index: BTreeMap<u64, (String, String)> = BTreeMap::new();
            let mut finish = Vec::new();
            for event in &sse.events {
                let choice = &event["choices"][0];
                if let Some(reason) = choice["finish_reason"].as_str() {
                    finish.push(reason.to_string());
                }
                for entry in choice["delta"]["tool_calls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let slot = by_index
                        .entry(entry["index"].as_u64().unwrap())
                        .or_default();
                    if let Some(name) = entry["function"]["name"].as_str() {
                        slot.0.push_str(name);
                    }
                    if let Some(args) = entry["function"]["arguments"].as_str() {
                        slot.1.push_str(args);
                    }
                }
            }
            assert_eq!(finish, ["tool_calls"], "{raw}");
            by_index
                .into_values()
                .map(|(name, args)| (name, parse(&args)))
                .collect()
        }
        (Door::Responses, stream) => {
            let object: Value = if stream {
                let (events, _) = parse_named_sse(raw);
                let last = events.last().unwrap();
                assert_eq!(last.event, "response.completed", "{raw}");
                last.data["response"].clone()
            } else {
                serde_json::from_str(raw).unwrap()
            };
            assert_eq!(object["status"], "completed", "{raw}");
            let items = object["output"].as_array().unwrap();
            items
                .iter()
                .filter(|i| i["type"] == "function_call")
                .map(|i| {
                    let args = i["arguments"].as_str().unwrap();
                    (i["name"].as_str().unwrap().into(), parse(args))
                })
                .collect()
        }
        (Door::Messages, false) => {
            let v: Value = serde_json::from_str(raw).unwrap();
            assert_eq!(v["stop_reason"], "tool_use", "{raw}");
            let blocks = v["content"].as_array().unwrap();
            blocks
                .iter()
                .filter(|b| b["type"] == "tool_use")
                .map(|b| (b["name"].as_str().unwrap().into(), b["input"].clone()))
                .collect()
        }
        (Door::Messages, true) => {
            let (events, _) = parse_named_sse(raw);
            let mut blocks: BTreeMap<u64, (String, String)> = BTreeMap::new();
            let mut stop = None;
            for e in &events {
                let index = e.data["index"].as_u64().unwrap_or(0);
                match e.event.as_str() {
                    "content_block_start" if e.data["content_block"]["type"] == "tool_use" => {
                        let name = e.data["content_block"]["name"].as_str().unwrap();
                        blocks.insert(index, (name.into(), String::new()));
                    }
                    "content_block_delta" if e.data["delta"]["type"] == "input_json_delta" => {
                        let piece = e.data["delta"]["partial_json"].as_str().unwrap();
                        blocks.get_mut(&index).unwrap().1.push_str(piece);
                    }
                    "message_delta" => stop = e.data["delta"]["stop_reason"].as_str(),
                    _ => {}
                }
            }
            assert_eq!(stop, Some("tool_use"), "{raw}");
            blocks
                .into_values()
                .map(|(name, args)| (name, parse(&args)))
                .collect()
        }
    }
}

/// One forced request against the server at `url`: a 200 whose answer is one call of
/// `name` with arguments valid for `schema`.
async fn one_case(url: &str, door: Door, force: Force, stream: bool, name: &str, schema: &Value) {
    let what = format!("{door:?} {force:?} stream={stream} {name}");
    let started = std::time::Instant::now();
    let r = post(
        url,
        path(door),
        None,
        &request(door, force, stream, name, schema),
    )
    .await;
    let status = r.status();
    let raw = r.text().await.unwrap();
    assert_eq!(status, 200, "{what}: {raw}");
    let calls = calls(door, stream, &raw);
    assert_eq!(calls.len(), 1, "{what}: {raw}");
    assert_eq!(calls[0].0, name, "{what}: {raw}");
    assert_valid(schema, &calls[0].1, &what);
    // The demo's agents obey at once: no invalid turns, no retries (which took 22 s).
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "{what}: {:?}",
        started.elapsed()
    );
}

/// Every forced form, streamed and not, with the flat tool; and the nested schema.
async fn door_cases(door: Door) {
    let server = support::serve(&["--demo"]);
    let weather = weather_schema();
    let order = order_schema();
    let mut cases = Vec::new();
    for force in [Force::Named, Force::Any] {
        for stream in [false, true] {
            cases.push((force, stream, "get_weather", &weather));
        }
    }
    cases.push((Force::Named, false, "final_result", &order));
    cases.push((Force::Any, true, "final_result", &order));
    let runs = cases.iter().map(|(force, stream, name, schema)| {
        one_case(&server.url, door, *force, *stream, name, schema)
    });
    join_all(runs).await;
}

#[tokio::test]
async fn demo_chat_completions_answers_a_forced_call_with_valid_arguments() {
    door_cases(Door::Chat).await;
}

#[tokio::test]
async fn demo_responses_answers_a_forced_call_with_valid_arguments() {
    door_cases(Door::Responses).await;
}

#[tokio::test]
async fn demo_messages_answers_a_forced_call_with_valid_arguments() {
    door_cases(Door::Messages).await;
}

/// The simulator's four wire formats, straight: `(path, body)` of a forced request.
fn simulator_request(format: &str, force: Force, stream: bool, schema: &Value) -> (String, Value) {
    let model = "sim:ttft_ms=0,token_ms=0";
    let user = "Q?";
    match format {
        "gemini" => {
            let action = if stream {
                "streamGenerateContent?alt=sse"
            } else {
                "generateContent"
            };
            let mut config = json!({"mode": "ANY"});
            if let Force::Named = force {
                config["allowedFunctionNames"] = json!(["get_weather"]);
            }
            let body = json!({"contents": [{"role": "user", "parts": [{"text": user}]}],
                "tools": [{"functionDeclarations": [
                    {"name": "other", "parameters": {"type": "OBJECT"}},
                    {"name": "get_weather", "parameters": schema}]}],
                "toolConfig": {"functionCallingConfig": config}});
            (format!("/v1beta/models/{model}:{action}"), body)
        }
        _ => {
            let door = match format {
                "chat" => Door::Chat,
                "responses" => Door::Responses,
                _ => Door::Messages,
            };
            let mut body = request(door, force, stream, "get_weather", schema);
            body["model"] = json!(model);
            (path(door).to_string(), body)
        }
    }
}

fn gemini_calls(stream: bool, raw: &str) -> Vec<(String, Value)> {
    let chunks: Vec<Value> = if stream {
        parse_sse(raw).events
    } else {
        vec![serde_json::from_str(raw).unwrap()]
    };
    chunks
        .iter()
        .flat_map(|c| c["candidates"][0]["content"]["parts"].as_array().cloned())
        .flatten()
        .filter_map(|p| {
            let call = p.get("functionCall")?;
            Some((call["name"].as_str()?.to_string(), call["args"].clone()))
        })
        .collect()
}

#[tokio::test]
async fn the_simulator_obeys_a_forced_call_in_every_wire_format() {
    let (base, stop, task) = support::simulator_in_process().await;
    let schema = weather_schema();
    for format in ["chat", "responses", "anthropic", "gemini"] {
        for force in [Force::Named, Force::Any] {
            for stream in [false, true] {
                let what = format!("{format} {force:?} stream={stream}");
                // Gemini's request offers `other` first: `mode: ANY` calls the first tool,
                // a named one calls that tool.
                let (path, body) = simulator_request(format, force, stream, &schema);
                let r = post(&base, &path, None, &body).await;
                assert_eq!(r.status(), 200, "{what}");
                let raw = r.text().await.unwrap();
                let calls = match format {
                    "chat" => calls(Door::Chat, stream, &raw),
                    "responses" => calls(Door::Responses, stream, &raw),
                    "anthropic" => calls(Door::Messages, stream, &raw),
                    _ => gemini_calls(stream, &raw),
                };
                assert_eq!(calls.len(), 1, "{what}: {raw}");
                let expected = match (format, force) {
                    ("gemini", Force::Any) => "other",
                    _ => "get_weather",
                };
                assert_eq!(calls[0].0, expected, "{what}: {raw}");
                if expected == "get_weather" {
                    assert_valid(&schema, &calls[0].1, &what);
                    assert_eq!(calls[0].1, json!({"city": "simulated", "unit": "celsius"}));
                }
            }
        }
    }
    // Naming a tool that is not offered is refused, as upstream.
    let (path, mut body) = simulator_request("chat", Force::Named, false, &schema);
    body["tool_choice"]["function"]["name"] = json!("missing");
    let r = post(&base, &path, None, &body).await;
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["error"]["param"], "tool_choice", "{v}");
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

/// A panel with one agent per wire format: all four obey the forced call, so every one
/// of them takes part (the proposals are the same: one answer, four votes).
#[tokio::test]
async fn a_panel_of_every_wire_format_obeys_a_forced_call() {
    let s = Setup::with_panel(
        |url| {
            format!(
                "agents:
  - id: cc
    backend: {{type: chatcompletion, base_url: \"{url}/v1\", model: \"cc:ttft_ms=10,token_ms=1\"}}
  - id: gpt
    backend: {{type: openai, base_url: \"{url}/v1\", api_key: sim, model: \"gpt:ttft_ms=20,token_ms=1\"}}
  - id: claude
    backend: {{type: claude, base_url: \"{url}/v1\", api_key: sim, model: \"claude:ttft_ms=30,token_ms=1\", max_tokens: 4096}}
  - id: gemini
    backend: {{type: gemini, base_url: \"{url}/v1beta\", api_key: sim, model: \"gem:ttft_ms=40,token_ms=1\"}}
retry:
  max_attempts: 2
  initial_backoff_ms: 10
  max_backoff_ms: 50
"
            )
        },
        &[],
    );
    let schema = weather_schema();
    for force in [Force::Named, Force::Any] {
        let body = request(Door::Chat, force, false, "get_weather", &schema);
        let r = post(&s.server.url, path(Door::Chat), None, &body).await;
        assert_eq!(r.status(), 200);
        let raw = r.text().await.unwrap();
        let calls = calls(Door::Chat, false, &raw);
        assert_eq!(calls.len(), 1, "{raw}");
        assert_valid(&schema, &calls[0].1, "panel");
        let v: Value = serde_json::from_str(&raw).unwrap();
        let meta = &v["massgen_metadata"];
        assert_eq!(meta["answers"].as_array().unwrap().len(), 1, "{meta}");
        assert_eq!(meta["votes"].as_array().unwrap().len(), 4, "{meta}");
    }
}

/// The simulator's generator against a real validator, over schemas of every kind.
#[test]
fn generated_instances_are_valid() {
    let schemas = [
        weather_schema(),
        order_schema(),
        json!({"type": "object", "properties": {}}),
        json!({"type": "object", "properties": {"a": {"type": ["integer", "null"], "maximum": -3}},
            "required": ["a"]}),
        json!({"type": "object", "properties": {"x": {"type": "number", "exclusiveMinimum": 0,
            "exclusiveMaximum": 1}, "y": {"type": "number", "multipleOf": 0.25, "minimum": 0.3}},
            "required": ["x", "y"]}),
        json!({"type": "object", "properties": {"s": {"type": "string", "minLength": 20, "maxLength": 25},
            "t": {"type": "string", "maxLength": 2}, "u": {"type": "string", "format": "uuid"},
            "w": {"type": "string", "format": "date-time"}, "h": {"type": "string", "format": "hostname"},
            "i": {"type": "string", "format": "ipv6"}, "d": {"type": "string", "format": "duration"},
            "r": {"type": "string", "format": "uri"}},
            "required": ["s", "t", "u", "w", "h", "i", "d", "r"]}),
        json!({"type": "object", "properties": {"list": {"type": "array", "minItems": 4, "maxItems": 4,
            "uniqueItems": true, "items": {"type": "integer", "minimum": 0, "maximum": 10}}},
            "required": ["list"]}),
        json!({"type": "object", "properties": {"pair": {"type": "array",
            "prefixItems": [{"type": "string"}, {"type": "boolean"}], "minItems": 2, "items": false}},
            "required": ["pair"]}),
        json!({"type": "object", "properties": {"has": {"type": "array", "contains": {"const": 7}}},
            "required": ["has"]}),
        json!({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
            {"properties": {"b": {"type": "integer", "minimum": 4}}, "required": ["b"]}]}),
        json!({"type": "object", "oneOf": [
            {"properties": {"kind": {"const": "circle"}, "r": {"type": "number", "minimum": 1}},
                "required": ["kind", "r"]},
            {"properties": {"kind": {"const": "square"}, "side": {"type": "number"}},
                "required": ["kind", "side"]}]}),
        json!({"definitions": {"Node": {"type": "object", "properties": {"value": {"type": "integer"},
            "children": {"type": "array", "items": {"$ref": "#/definitions/Node"}}},
            "required": ["value", "children"]}}, "$ref": "#/definitions/Node"}),
        json!({"type": "object", "minProperties": 2, "properties": {"a": {"type": "boolean"},
            "b": {"type": "null"}, "c": {"type": "string"}}}),
    ];
    for schema in &schemas {
        let arguments = massgen_simulator::instance::arguments(schema, false);
        assert_valid(schema, &arguments, "arguments");
        let every = massgen_simulator::instance::arguments(schema, true);
        assert_valid(schema, &every, "every property");
        let answer: Value =
            serde_json::from_str(&massgen_simulator::instance::answer(Some(schema), false))
                .unwrap();
        assert_valid(schema, &answer, "answer");
    }
}
