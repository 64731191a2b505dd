//! The Responses door's items on the real binary (issue 24): `item_reference`s to the items
//! of stored responses (what the Vercel AI SDK sends with `store` on: `msg_…`, `rs_…`,
//! function calls) stand for those items, by the same key only, and reach the agents
//! without the deliberation; reasoning items carry `encrypted_content` when asked for,
//! which comes back verified. The panel runs on the simulator served in this process
//! behind a layer that records every upstream body, so what the agents got is checked.

use std::ffi::OsStr;
use std::process::Command;

use serde_json::{Value, json};

use crate::support::recording::{self, Seen};
use crate::support::{Proc, bin, client, parse_named_sse, post, start, write};

const KEYS: &str = "items-key-one,items-key-two";
const ONE: &str = "items-key-one";
const TWO: &str = "items-key-two";

/// Two fast agents.
const QUICK: [&str; 2] = ["q1:ttft_ms=5,token_ms=1", "q2:ttft_ms=10,token_ms=1"];
/// Two agents that call the first client tool offered, then answer with its result.
const TOOL: [&str; 2] = [
    "t1:policy=client_tool,ttft_ms=5,token_ms=1",
    "t2:policy=client_tool,ttft_ms=20,token_ms=1",
];

struct Panel {
    server: Proc,
    seen: Seen,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Panel {
    /// A server (with `args`, and `keys` when given) whose agents are `models` on the
    /// recording simulator.
    async fn start(models: &[&str], args: &[&str], keys: Option<&str>) -> Self {
        let (url, seen, stop) = recording::serve().await;
        let dir = tempfile::tempdir().unwrap();
        let config = write(
            dir.path(),
            "team.yaml",
            &crate::support::panel_yaml(&url, models, ""),
        );
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--host", "127.0.0.1", "--port", "0", "--config"])
            .arg(&config)
            .args(args.iter().map(OsStr::new))
            .env_remove("MASSGEN_SERVER_API_KEYS_FILE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT");
        match keys {
            Some(keys) => cmd.env("MASSGEN_SERVER_API_KEYS", keys),
            None => cmd.env_remove("MASSGEN_SERVER_API_KEYS"),
        };
        let server = tokio::task::spawn_blocking(move || start(cmd, "massgen listening on"))
            .await
            .unwrap();
        Self {
            server,
            seen,
            _dir: dir,
            _stop: stop,
        }
    }

    /// The upstream bodies since the last call, as text.
    fn take_upstream(&self) -> Vec<String> {
        recording::take(&self.seen)
            .iter()
            .map(Value::to_string)
            .collect()
    }

    async fn ask(&self, key: Option<&str>, body: Value) -> (u16, Value) {
        let r = post(&self.server.url, "/v1/responses", key, &body).await;
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }
}

fn item<'a>(object: &'a Value, kind: &str) -> &'a Value {
    object["output"]
        .as_array()
        .unwrap_or_else(|| panic!("no output: {object}"))
        .iter()
        .find(|i| i["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} item: {object}"))
}

fn answer(object: &Value) -> String {
    item(object, "message")["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// `text` as it appears inside a JSON string.
fn escaped(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap();
    quoted[1..quoted.len() - 1].to_string()
}

fn reference(id: &Value) -> Value {
    json!({"type": "item_reference", "id": id})
}

#[tokio::test]
async fn references_to_messages_and_reasoning_stand_for_the_stored_items() {
    let p = Panel::start(&QUICK, &[], None).await;
    let (status, first) = p.ask(None, json!({"input": "Why is the sky blue?"})).await;
    assert_eq!(status, 200, "{first}");
    let (rs, msg) = (item(&first, "reasoning"), item(&first, "message"));
    assert!(rs["id"].as_str().unwrap().starts_with("rs_"), "{rs}");
    assert!(msg["id"].as_str().unwrap().starts_with("msg_"), "{msg}");
    assert_ne!(rs["id"], msg["id"]);
    let summary = rs["summary"][0]["text"].as_str().unwrap().to_string();
    let said = answer(&first);
    p.take_upstream();

    // Turn 2 as the AI SDK sends it: the question again, the output by reference.
    let (status, second) = p
        .ask(
            None,
            json!({"input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Why is the sky blue?"}]},
                reference(&rs["id"]),
                reference(&msg["id"]),
                {"role": "user", "content": [{"type": "input_text", "text": "And at sunset?"}]}
            ]}),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    let upstream = p.take_upstream();
    assert!(!upstream.is_empty());
    assert!(
        upstream.iter().any(|b| b.contains(&escaped(&said))),
        "the earlier answer reached the agents"
    );
    assert!(
        upstream.iter().all(|b| !b.contains(&escaped(&summary))),
        "the deliberation did not"
    );
    // Items of the second response are referable too, streamed ones included.
    let r = post(
        &p.server.url,
        "/v1/responses",
        None,
        &json!({"stream": true, "input": [
            {"role": "user", "content": "Why?"}, reference(&item(&second, "message")["id"]),
            {"role": "user", "content": "Go on."}]}),
    )
    .await;
    assert_eq!(r.status(), 200);
    let (events, _) = parse_named_sse(&r.text().await.unwrap());
    let last = &events.last().unwrap().data;
    assert_eq!(last["type"], "response.completed", "{last}");
    let streamed = &last["response"];
    let (status, _) = p
        .ask(
            None,
            json!({"input": [{"role": "user", "content": "Why?"},
                reference(&item(streamed, "reasoning")["id"]),
                reference(&item(streamed, "message")["id"]),
                {"role": "user", "content": "Thanks."}]}),
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_tool_loop_goes_on_by_reference() {
    let p = Panel::start(&TOOL, &[], None).await;
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let question = json!({"role": "user", "content": "What is the weather in Paris?"});
    let (status, first) = p
        .ask(None, json!({"tools": tools, "input": [question]}))
        .await;
    assert_eq!(status, 200, "{first}");
    let call = item(&first, "function_call").clone();
    assert!(call["id"].as_str().unwrap().starts_with("fc_"), "{call}");
    p.take_upstream();
    let mut input = vec![question.clone()];
    if let Some(rs) = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] == "reasoning")
    {
        input.push(reference(&rs["id"]));
    }
    input.push(reference(&call["id"]));
    input.push(
        json!({"type": "function_call_output", "call_id": call["call_id"],
        "output": "18C and sunny"}),
    );
    let (status, second) = p.ask(None, json!({"tools": tools, "input": input})).await;
    assert_eq!(status, 200, "{second}");
    let text = answer(&second);
    assert!(text.contains("18C and sunny"), "{text}");
    // The agents got the call itself, by name and id, before its result.
    let upstream = p.take_upstream();
    let call_id = call["call_id"].as_str().unwrap();
    assert!(
        upstream
            .iter()
            .any(|b| b.contains("get_weather") && b.contains(call_id)),
        "{upstream:?}"
    );
}

#[tokio::test]
async fn unknown_and_other_keys_items_are_refused_naming_them() {
    let p = Panel::start(&QUICK, &[], Some(KEYS)).await;
    let (status, mine) = p.ask(Some(ONE), json!({"input": "Hi"})).await;
    assert_eq!(status, 200, "{mine}");
    let msg = item(&mine, "message")["id"].clone();
    let turn = |reference: Value| {
        json!({"input": [{"role": "user", "content": "Hi"}, reference,
        {"role": "user", "content": "More"}]})
    };
    let (status, _) = p.ask(Some(ONE), turn(reference(&msg))).await;
    assert_eq!(status, 200);
    for (key, id) in [(TWO, msg.clone()), (ONE, json!("msg_nope"))] {
        let (status, body) = p.ask(Some(key), turn(reference(&id))).await;
        assert_eq!(status, 400, "{body}");
        let error = &body["error"];
        assert_eq!(error["code"], "item_not_found", "{body}");
        assert_eq!(error["param"], "input[1]", "{body}");
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains(id.as_str().unwrap()),
            "{body}"
        );
    }
    // The other key does not see the response either.
    let r = client()
        .get(format!(
            "{}/v1/responses/{}",
            p.server.url,
            mine["id"].as_str().unwrap()
        ))
        .bearer_auth(TWO)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn store_false_keeps_no_items() {
    let p = Panel::start(&QUICK, &[], None).await;
    let (status, object) = p.ask(None, json!({"input": "Hi", "store": false})).await;
    assert_eq!(status, 200);
    for kind in ["message", "reasoning"] {
        let (status, body) = p
            .ask(
                None,
                json!({"input": [{"role": "user", "content": "Hi"},
                    reference(&item(&object, kind)["id"]), {"role": "user", "content": "More"}]}),
            )
            .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "item_not_found");
    }
    let r = client()
        .get(format!(
            "{}/v1/responses/{}",
            p.server.url,
            object["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn encrypted_content_only_when_included_and_only_ours_comes_back() {
    let p = Panel::start(&QUICK, &["--reasoning-secret", "test-secret"], None).await;
    // Not asked for: no such field, streamed or not.
    let (_, plain) = p.ask(None, json!({"input": "Hi"})).await;
    assert!(
        item(&plain, "reasoning").get("encrypted_content").is_none(),
        "{plain}"
    );
    let include = json!(["reasoning.encrypted_content"]);
    let (status, sealed) = p
        .ask(None, json!({"input": "Hi", "include": include}))
        .await;
    assert_eq!(status, 200);
    let rs = item(&sealed, "reasoning").clone();
    let content = rs["encrypted_content"].as_str().unwrap().to_string();
    assert!(content.starts_with("mg1."), "{rs}");
    // The stored object is the one served.
    let got: Value = client()
        .get(format!(
            "{}/v1/responses/{}",
            p.server.url,
            sealed["id"].as_str().unwrap()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        item(&got, "reasoning")["encrypted_content"],
        content.as_str()
    );
    // Streamed: on the item when added, when done, and in the final object.
    for include in [json!([]), include.clone()] {
        let r = post(
            &p.server.url,
            "/v1/responses",
            None,
            &json!({"stream": true, "input": "Hi", "include": include}),
        )
        .await;
        let (events, _) = parse_named_sse(&r.text().await.unwrap());
        let wanted = !include.as_array().unwrap().is_empty();
        let mut seen = 0;
        for e in &events {
            let items: Vec<&Value> = match e.data["type"].as_str().unwrap() {
                "response.output_item.added" | "response.output_item.done" => vec![&e.data["item"]],
                "response.completed" => e.data["response"]["output"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .collect(),
                _ => continue,
            };
            for i in items.into_iter().filter(|i| i["type"] == "reasoning") {
                seen += 1;
                assert_eq!(
                    i["encrypted_content"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("mg1.")),
                    wanted,
                    "{i}"
                );
            }
        }
        assert!(seen >= 3, "{events:?}");
    }
    // Sent back as the Agents SDK and Codex do: accepted (and dropped).
    let back = |content: &str| {
        json!({"input": [{"role": "user", "content": "Hi"},
            {"type": "reasoning", "id": rs["id"], "summary": rs["summary"], "encrypted_content": content},
            item(&sealed, "message").clone(), {"role": "user", "content": "More"}],
            "store": false})
    };
    let (status, body) = p.ask(None, back(&content)).await;
    assert_eq!(status, 200, "{body}");
    // OpenAI's, or another deployment's: refused, naming the field.
    let forgeries = [
        "gAAAAABoxC0dvsKe9_yf1eFtIG4UOjaLmzFt3iGkRB08".to_string(),
        content.replacen("mg1.", "mg1.x", 1),
    ];
    // Without --reasoning-secret the key is per process, and a seal from before a restart
    // cannot be told from a forgery: dropped, not refused.
    let lenient = Panel::start(&QUICK, &[], None).await;
    for forged in &forgeries {
        let (status, body) = lenient.ask(None, back(forged)).await;
        assert_eq!(status, 200, "{body}");
    }
    for forged in forgeries {
        let (status, body) = p.ask(None, back(&forged)).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["code"], "invalid_value");
        assert_eq!(body["error"]["param"], "input[1].encrypted_content");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not made by this deployment"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn references_cannot_make_the_server_hold_more_than_a_bound() {
    let p = Panel::start(&QUICK, &[], None).await;
    // An input item sent with an id is kept, and can be referenced: a 4,000-character one.
    let big = "x".repeat(4_000);
    let (status, first) = p
        .ask(
            None,
            json!({"input": [{"type": "message", "role": "user", "id": "big_1", "content": big}]}),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    let msg = json!("big_1");
    // A few bytes of body each, a whole stored text each: 32 MiB of text is reached
    // within the 10,000 items a request may send, and long before the body limit.
    let many = 32 * 1024 * 1024 / (big.len() + 64) + 2;
    assert!(
        many < 10_000 && many * 60 < 10 * 1024 * 1024,
        "within the item and body limits"
    );
    let mut input = vec![json!({"role": "user", "content": "Why?"})];
    input.extend(std::iter::repeat_n(reference(&msg), many));
    input.push(json!({"role": "user", "content": "Go on."}));
    let (status, body) = p.ask(None, json!({"input": input})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "too_many_references", "{body}");
    assert!(
        body["error"]["param"]
            .as_str()
            .unwrap()
            .starts_with("input["),
        "{body}"
    );
    // A conversation's ordinary use of references is untouched.
    let (status, _) = p
        .ask(
            None,
            json!({"input": [{"role": "user", "content": "Why?"}, reference(&msg),
                {"role": "user", "content": "Go on."}]}),
        )
        .await;
    assert_eq!(status, 200);
}
