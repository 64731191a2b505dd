//! Client tools end to end: the real binary, agents on the real simulator
//! (`policy=client_tool`), loopback HTTP.

use serde_json::{Value, json};

use crate::support::{Setup, chat, panel_yaml, parse_sse};

fn setup(models: &[&str]) -> Setup {
    Setup::with_panel(|mock_url| panel_yaml(mock_url, models, ""), &[])
}

const PANEL: [&str; 3] = [
    "a:policy=client_tool,ttft_ms=10,token_ms=1",
    "b:policy=client_tool,ttft_ms=60,token_ms=1",
    "c:policy=client_tool,ttft_ms=120,token_ms=1",
];

fn weather_tool() -> Value {
    json!({"type": "function", "function": {"name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]}}})
}

fn request(stream: bool, messages: Value) -> Value {
    json!({"model": "massgen", "stream": stream, "messages": messages, "tools": [weather_tool()]})
}

fn question() -> Value {
    json!([{"role": "user", "content": "What is the weather in Paris?"}])
}

#[tokio::test]
async fn the_panel_returns_its_agreed_tool_call_and_then_uses_the_result() {
    let s = setup(&PANEL);
    let r = chat(&s.server.url, None, &request(false, question())).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert!(choice["message"]["content"].is_null(), "{body}");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"city": "simulated"}));
    let meta = &body["massgen_metadata"];
    assert_eq!(meta["presentation"], "skipped");
    // The identical proposals of the others became votes: one answer, three votes.
    assert_eq!(meta["answers"].as_array().unwrap().len(), 1, "{meta}");
    assert_eq!(meta["answers"][0]["content"]["type"], "tool_calls");
    assert_eq!(meta["votes"].as_array().unwrap().len(), 3);
    let reasoning = choice["message"]["reasoning_content"].as_str().unwrap();
    assert!(
        reasoning
            .contains(r#"[agent1] proposes calling get_weather({"city":"simulated"}) (agent1.1)"#),
        "{reasoning}"
    );

    // The follow-up with the client's result: agents see it and answer in text.
    let call = calls[0].clone();
    let id = call["id"].as_str().unwrap().to_string();
    let mut messages = question();
    let list = messages.as_array_mut().unwrap();
    list.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
    list.push(json!({"role": "tool", "tool_call_id": id, "content": "18C and sunny"}));
    let r = chat(&s.server.url, None, &request(false, messages)).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    let content = choice["message"]["content"].as_str().unwrap();
    assert!(content.contains("18C and sunny"), "{content}");
    assert!(choice["message"].get("tool_calls").is_none());
}

#[tokio::test]
async fn streamed_tool_calls_follow_the_delta_contract() {
    let s = setup(&PANEL);
    let r = chat(&s.server.url, None, &request(true, question())).await;
    assert_eq!(r.status(), 200);
    let sse = parse_sse(&r.text().await.unwrap());
    assert!(sse.done);
    let entries: Vec<&Value> = sse
        .events
        .iter()
        .filter_map(|e| e["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert!(entries.len() >= 2, "{}", sse.raw);
    assert_eq!(entries[0]["index"], 0);
    assert!(entries[0]["id"].as_str().unwrap().starts_with("call_"));
    assert_eq!(entries[0]["function"]["name"], "get_weather");
    assert!(
        entries[1..]
            .iter()
            .all(|e| e.get("id").is_none() && e["function"].get("name").is_none())
    );
    let args: String = entries
        .iter()
        .map(|e| e["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"city": "simulated"})
    );
    let finish: Vec<&str> = sse
        .events
        .iter()
        .filter_map(|e| e["choices"][0]["finish_reason"].as_str())
        .collect();
    assert_eq!(finish, ["tool_calls"]);
    assert_eq!(sse.content(), "");
}

#[tokio::test]
async fn tool_choice_none_gets_text_and_collisions_are_rejected() {
    let s = setup(&PANEL);
    let mut body = request(false, question());
    body["tool_choice"] = json!("none");
    let r = chat(&s.server.url, None, &body).await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .starts_with("[simulated final answer]")
    );

    // Only the workflow tools every panel offers are refused, each by name; the client's
    // `mcp__…` tools are its own (tests/it/agent_tool_shapes.rs runs them through a loop).
    for name in ["vote", "new_answer"] {
        let mut body = request(false, question());
        body["tools"] = json!([{"type": "function", "function": {"name": name}}]);
        let r = chat(&s.server.url, None, &body).await;
        assert_eq!(r.status(), 400);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["code"], "tool_name_collision");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(
            message.contains(&format!("the panel's own workflow tool '{name}'")),
            "{message}"
        );
    }
}
