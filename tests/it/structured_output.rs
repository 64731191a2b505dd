//! Structured output (issue 13 §1) against the real binary and the simulator: the panel
//! answers a requested schema with a valid instance (the simulator writes one only when
//! the presentation request carries the native format; its coordination answers are
//! prose), an invalid answer gets one corrective presentation call, a second failure is a
//! clear error in the door's shape, and usage counts every call.

use serde_json::{Value, json};

use crate::support::{
    Setup, assert_usage_is_the_simulators, chat, mock_stats, panel_yaml, parse_sse, write,
};

const PANEL: [&str; 2] = ["sim-a:ttft_ms=0,token_ms=0", "sim-b:ttft_ms=0,token_ms=0"];

fn setup(orchestrator: &str) -> Setup {
    Setup::start(|mock_url, dir| {
        let team = write(
            dir,
            "team.yaml",
            &panel_yaml(mock_url, &PANEL, orchestrator),
        );
        vec!["--config".to_string(), team.display().to_string()]
    })
}

pub fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0},
            "role": {"enum": ["admin", "user"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "address": {"type": "object", "properties": {"city": {"type": "string"}},
                "required": ["city"], "additionalProperties": false}
        },
        "required": ["name", "age", "role", "tags", "address"],
        "additionalProperties": false
    })
}

/// What the simulator writes for [`person_schema`].
fn person() -> Value {
    json!({"name": "simulated", "age": 0, "role": "admin", "tags": [],
        "address": {"city": "simulated"}})
}

fn ask(question: &str, stream: bool, format: Value) -> Value {
    json!({"model": "massgen", "stream": stream, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": question}], "response_format": format})
}

/// The non-streamed response's body.
async fn complete(url: &str, body: &Value) -> Value {
    chat(url, None, body).await.json().await.unwrap()
}

/// The answer of a non-streamed response, parsed.
fn answer(body: &Value) -> Value {
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    serde_json::from_str(content).unwrap()
}

fn schema_format() -> Value {
    json!({"type": "json_schema",
        "json_schema": {"name": "person", "strict": true, "schema": person_schema()}})
}

#[tokio::test]
async fn a_json_schema_gets_a_valid_instance_streamed_or_not() {
    let s = setup("");
    let url = &s.server.url;
    let r = chat(url, None, &ask("Who?", false, schema_format())).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let choice = &body["choices"][0];
    let content = choice["message"]["content"].as_str().unwrap();
    assert_eq!(serde_json::from_str::<Value>(content).unwrap(), person());
    assert_eq!(choice["finish_reason"], "stop");

    let raw = chat(url, None, &ask("Who?", true, schema_format()))
        .await
        .text()
        .await
        .unwrap();
    let sse = parse_sse(&raw);
    assert!(sse.done, "{raw}");
    assert_eq!(
        serde_json::from_str::<Value>(&sse.content()).unwrap(),
        person()
    );

    // JSON mode: any object.
    let body = complete(url, &ask("Who?", false, json!({"type": "json_object"}))).await;
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(content).unwrap().is_object());
}

#[tokio::test]
async fn an_invalid_answer_gets_one_corrective_call_counted_in_usage() {
    let s = setup("");
    let body = complete(
        &s.server.url,
        &ask("Who? [sim:invalid_json_once]", false, schema_format()),
    )
    .await;
    assert_eq!(answer(&body), person());
    let reasoning = body["choices"][0]["message"]["reasoning_content"]
        .as_str()
        .unwrap();
    assert!(
        reasoning.contains("not in the required format") && reasoning.contains("\"name\""),
        "{reasoning}"
    );
    let stats = mock_stats(&s.mock).await;
    assert_usage_is_the_simulators(&body["usage"], &stats);
    // Two agents answer and vote (four calls), then two presentation calls.
    assert_eq!(stats["requests"], 6, "{stats}");
}

#[tokio::test]
async fn a_second_invalid_answer_is_a_clear_error_not_prose() {
    let s = setup("");
    let url = &s.server.url;
    let r = chat(
        url,
        None,
        &ask("Who? [sim:invalid_json]", false, schema_format()),
    )
    .await;
    assert_eq!(r.status(), 502);
    assert_eq!(r.headers()["x-should-retry"], "false");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_output", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("\"name\" is a required property"),
        "{message}"
    );

    // Streamed, the invalid text is already out: no retry, the stream ends with the error.
    let before = mock_stats(&s.mock).await["requests"].as_u64().unwrap();
    let raw = chat(
        url,
        None,
        &ask("Who? [sim:invalid_json]", true, schema_format()),
    )
    .await
    .text()
    .await
    .unwrap();
    let sse = parse_sse(&raw);
    let last = sse.events.last().unwrap();
    assert_eq!(last["error"]["code"], "invalid_output", "{raw}");
    let after = mock_stats(&s.mock).await["requests"].as_u64().unwrap();
    assert_eq!(after - before, 5, "one presentation call only");
}

#[tokio::test]
async fn a_stored_answer_is_checked_and_presented_again_when_it_fails() {
    // The simulator's coordination answers are prose: the stored answer fails the check,
    // and one presentation call with the format makes it valid.
    let s = setup("orchestrator:\n  skip_final_presentation: true\n");
    let body = complete(&s.server.url, &ask("Who?", false, schema_format())).await;
    assert_eq!(answer(&body), person());
    assert_eq!(mock_stats(&s.mock).await["requests"], 5);
}

#[tokio::test]
async fn unusable_formats_are_400s_naming_response_format() {
    let s = setup("");
    let big = json!({"type": "object", "description": "x".repeat(70_000)});
    for format in [
        json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": 7}}}),
        json!({"type": "json_schema", "json_schema": {"name": "a b", "schema": {}}}),
        json!({"type": "json_schema", "json_schema": {"name": "a", "schema": big}}),
        json!({"type": "json_schema", "json_schema": {"name": "a",
            "schema": {"$ref": "https://example.com/s.json"}}}),
        json!({"type": "yaml"}),
    ] {
        let r = chat(&s.server.url, None, &ask("Who?", false, format.clone())).await;
        assert_eq!(r.status(), 400, "{format}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["param"], "response_format", "{body}");
    }
}

/// `text` of the Responses output's message item.
fn responses_text(body: &Value) -> String {
    let items = body["output"].as_array().unwrap();
    let message = items.iter().find(|i| i["type"] == "message").unwrap();
    message["content"][0]["text"].as_str().unwrap().to_string()
}

/// `text` of the Messages response's text block.
fn messages_text(body: &Value) -> String {
    let blocks = body["content"].as_array().unwrap();
    let text = blocks.iter().find(|b| b["type"] == "text").unwrap();
    text["text"].as_str().unwrap().to_string()
}

async fn messages_post(url: &str, body: &Value) -> reqwest::Response {
    crate::support::client()
        .post(format!("{url}/v1/messages"))
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_responses_and_messages_doors_take_their_own_format_fields() {
    use crate::support::{parse_named_sse, post};
    let s = setup("");
    let url = &s.server.url;
    let format = json!({"type": "json_schema", "name": "person", "strict": true,
        "schema": person_schema()});
    let ask_responses = |input: &str, stream: bool| json!({"model": "massgen", "input": input, "stream": stream, "text": {"format": format}});
    let r = post(url, "/v1/responses", None, &ask_responses("Who?", false)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&responses_text(&body)).unwrap(),
        person()
    );
    assert_eq!(body["text"]["format"]["name"], "person", "echoed");
    let raw = post(url, "/v1/responses", None, &ask_responses("Who?", true))
        .await
        .text()
        .await
        .unwrap();
    let (events, _) = parse_named_sse(&raw);
    let done = events
        .iter()
        .find(|e| e.event == "response.completed")
        .unwrap();
    let text = responses_text(&done.data["response"]);
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), person());
    let r = post(
        url,
        "/v1/responses",
        None,
        &ask_responses("Who? [sim:invalid_json]", false),
    )
    .await;
    assert_eq!(r.status(), 502);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_output", "{body}");

    let ask_messages = |content: &str, key: &str| {
        let mut body = json!({"model": "massgen", "max_tokens": 1024,
            "messages": [{"role": "user", "content": content}]});
        body[key] = if key == "output_config" {
            json!({"format": {"type": "json_schema", "schema": person_schema()}})
        } else {
            json!({"type": "json_schema", "schema": person_schema()})
        };
        body
    };
    for key in ["output_config", "output_format"] {
        let r = messages_post(url, &ask_messages("Who?", key)).await;
        assert_eq!(r.status(), 200, "{key}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&messages_text(&body)).unwrap(),
            person()
        );
    }
    let r = messages_post(
        url,
        &ask_messages("Who? [sim:invalid_json]", "output_config"),
    )
    .await;
    assert_eq!(r.status(), 502);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["type"], "error", "Anthropic's shape: {body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requested response format"),
        "{body}"
    );
}
