use super::*;
use massgen_core::Secret;
use massgen_core::provider::Role as MessageRole;
use serde_json::json;

fn signer() -> Signer {
    Signer::new(Some(&Secret::new("test-secret")))
}

fn parse_json(v: Value) -> Result<MessagesRequest, ApiError> {
    parse(v.to_string().as_bytes(), true, &signer())
}

fn code(v: Value) -> &'static str {
    match parse_json(v) {
        Err(e) => e.code(),
        Ok(_) => "ok",
    }
}

/// The error's param (the JSON path) and message.
fn refusal(v: Value) -> (String, String) {
    let e = parse_json(v).expect_err("refused");
    (e.param().unwrap_or_default().to_string(), e.message())
}

#[test]
fn the_shared_fields_are_not_the_doors_own() {
    assert!(crate::server::doors::parse::overlap::<Body, Bounds>().is_empty());
}

#[test]
fn claude_code_shaped_requests_parse() {
    let req = parse_json(json!({
        "model": "claude-opus-4-8", "max_tokens": 32000, "stream": true,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc"},
                   {"type": "text", "text": "You are Claude.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "<system-reminder>r</system-reminder>"},
                {"type": "text", "text": "Say pong", "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": "Available agent types"},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "…", "signature": ""},
                {"type": "redacted_thinking", "data": "EmwKAhgB"},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo hi"}}]},
            {"role": "user", "content": [{"tool_use_id": "toolu_1", "type": "tool_result", "content": "hi",
                "is_error": false, "cache_control": {"type": "ephemeral"}}]}
        ],
        "tools": [{"name": "Bash", "description": "Run", "input_schema": {"type": "object"},
            "cache_control": {"type": "ephemeral"}}],
        "metadata": {"user_id": "{\"device_id\":\"d\"}"},
        "thinking": {"type": "adaptive"}, "context_management": {"edits": []},
        "output_config": {"effort": "high"}, "top_k": 5
    }))
    .unwrap();
    assert_eq!(req.model, "claude-opus-4-8");
    assert!(req.stream);
    assert_eq!(req.system.len(), 3);
    assert_eq!(req.system[2], "Available agent types");
    assert_eq!(req.messages.len(), 3);
    assert_eq!(
        req.messages[0].content,
        "<system-reminder>r</system-reminder>\nSay pong"
    );
    assert_eq!(
        req.messages[1].tool_calls[0].arguments,
        r#"{"command":"echo hi"}"#
    );
    assert_eq!(req.messages[2].role, MessageRole::Tool);
    assert_eq!(req.messages[2].content, "hi");
    assert_eq!(req.tools.tools[0].name, "Bash");
    assert_eq!(req.user_id.as_deref(), Some("{\"device_id\":\"d\"}"));
    assert!(req.output.is_none());
}

#[test]
fn tool_results_keep_their_text_and_error_flag() {
    let req = parse_json(json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": null}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "is_error": true,
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"type": "text", "text": "go on"}]}]}))
    .unwrap();
    assert_eq!(req.messages[1].tool_calls[0].arguments, "{}");
    assert_eq!(req.messages[2].content, "[error] a\nb");
    assert_eq!(req.messages[3].content, "go on");
}

/// Claude Code's tool search (2.1.332): the tools `ToolSearch` may load carry
/// `defer_loading`, and loading one is a `tool_result` holding a `tool_reference`.
fn searched(result: Value, tools: Value) -> Value {
    json!({"max_tokens": 10, "tools": tools, "messages": [
        {"role": "user", "content": "Fetch the page"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ToolSearch",
            "input": {"query": "select:WebFetch"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": result}]}]})
}

fn deferred_tools() -> Value {
    json!([
        {"name": "ToolSearch", "input_schema": {"type": "object"}},
        {"name": "WebFetch", "input_schema": {"type": "object"}, "defer_loading": true},
        {"name": "WebSearch", "input_schema": {"type": "object"}, "defer_loading": true}
    ])
}

fn offered(req: &MessagesRequest) -> Vec<&str> {
    req.tools.tools.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn deferred_tools_are_offered_once_a_tool_reference_loads_them() {
    let reference = json!([{"type": "tool_reference", "tool_name": "WebFetch"}]);
    let req = parse_json(searched(reference.clone(), deferred_tools())).unwrap();
    assert_eq!(offered(&req), ["ToolSearch", "WebFetch"]);
    assert_eq!(
        req.messages[2].content,
        "[tool WebFetch loaded: it is offered from now on]"
    );
    // Before the search only the tools not deferred are offered.
    let mut first = searched(json!("x"), deferred_tools());
    first["messages"] = json!([{"role": "user", "content": "Fetch the page"}]);
    assert_eq!(offered(&parse_json(first.clone()).unwrap()), ["ToolSearch"]);
    first["tool_choice"] = json!({"type": "tool", "name": "WebSearch"});
    let (param, message) = refusal(first);
    assert_eq!(param, "tool_choice");
    assert!(message.contains("'defer_loading'"), "{message}");
    // A reference must name a tool of the request.
    let unknown = json!([{"type": "tool_reference", "tool_name": "NotebookEdit"}]);
    let (param, message) = refusal(searched(unknown, deferred_tools()));
    assert_eq!(param, "messages[2].content[0].content[0].tool_name");
    assert!(
        message.contains("'NotebookEdit', which is not in 'tools'"),
        "{message}"
    );
}

#[test]
fn tool_results_take_every_documented_block() {
    // The smallest PNG header the image checks accept: 1x1.
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
    let content = json!([
        {"type": "text", "text": "Read 1 image"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}},
        {"type": "document", "title": "notes.txt", "context": "from disk",
            "source": {"type": "text", "media_type": "text/plain", "data": "line one"}},
        {"type": "document", "source": {"type": "content", "content": [
            {"type": "text", "text": "inner"},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/b.png"}}]}},
        {"type": "document", "title": "spec.pdf",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
        {"type": "search_result", "source": "https://example.com/s", "title": "Result",
            "content": [{"type": "text", "text": "found it"}], "citations": {"enabled": true}}
    ]);
    let req = parse_json(searched(content, json!([]))).unwrap();
    let result = &req.messages[2];
    assert_eq!(result.role, MessageRole::Tool);
    assert_eq!(result.images.len(), 2);
    assert_eq!(
        result.content,
        "Read 1 image\n\n[document \"notes.txt\"]\nfrom disk\nline one\n[document]\ninner\n\
         [document \"spec.pdf\": a PDF the panel cannot read; its content is not shown]\n\
         [search result \"Result\" from https://example.com/s]\nfound it"
    );
    let bad = json!([{"type": "document", "source": {"type": "file", "file_id": "f"}}]);
    let (param, message) = refusal(searched(bad, json!([])));
    assert_eq!(param, "messages[2].content[0].content[0].source");
    assert!(
        message.contains("source type 'file' is not supported"),
        "{message}"
    );
    let bad = json!([{"type": "image", "source": {"type": "base64", "media_type": "image/gif",
        "data": "R0lGODlh"}}]);
    assert_eq!(code(searched(bad, json!([]))), "unsupported_image_type");
    let unknown = json!([{"type": "video", "url": "x"}]);
    let (param, message) = refusal(searched(unknown, json!([])));
    assert_eq!(param, "messages[2].content[0]");
    assert!(message.contains("unknown variant `video`"), "{message}");
}

#[test]
fn what_a_panel_cannot_honour_is_refused() {
    let msgs = json!([{"role": "user", "content": "x"}]);
    assert_eq!(
        code(json!({"messages": msgs})),
        "missing_required_parameter"
    );
    assert_eq!(
        code(json!({"max_tokens": 10})),
        "missing_required_parameter"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": []})),
        "empty_array"
    );
    assert_eq!(
        code(json!({"max_tokens": 0, "messages": msgs})),
        "invalid_value"
    );
    assert_eq!(
        code(
            json!({"max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": ""}}]}]})
        ),
        "invalid_message"
    );
    let image = |source: Value| {
        code(
            json!({"max_tokens": 10, "messages": [{"role": "user", "content": [
            {"type": "image", "source": source}]}]}),
        )
    };
    assert_eq!(
        image(json!({"type": "url", "url": "http://example.com/a.png"})),
        "invalid_image_url"
    );
    assert_eq!(
        image(json!({"type": "base64", "media_type": "image/gif", "data": "R0lGODlh"})),
        "unsupported_image_type"
    );
    assert_eq!(
        image(json!({"type": "file", "file_id": "file_1"})),
        "invalid_message"
    );
    assert_eq!(
        code(
            json!({"max_tokens": 10, "messages": [{"role": "user", "content": "x"},
            {"role": "assistant", "content": [{"type": "image",
            "source": {"type": "url", "url": "https://example.com/a.png"}}]},
            {"role": "user", "content": "y"}]})
        ),
        "invalid_message"
    );
    let req = parse_json(
        json!({"max_tokens": 10, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {"type": "text", "text": "What is it?"}]}]}),
    )
    .unwrap();
    assert_eq!(req.messages[0].images.len(), 1);
    assert_eq!(req.messages[0].content, "What is it?");
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs,
            "tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
        "invalid_value"
    );
    assert_eq!(
        code(
            json!({"max_tokens": 10, "messages": msgs, "tools": [{"name": "vote", "input_schema": {}}]})
        ),
        "tool_name_collision"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs, "tools": [
            {"name": "a", "input_schema": {}}, {"name": "a", "input_schema": {}}]})),
        "invalid_value"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs, "tool_choice": {"type": "any"}})),
        "invalid_value"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs,
            "output_config": {"format": {"type": "json_schema", "schema": {}}}})),
        "ok"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs,
            "output_format": {"type": "json_schema", "schema": {"type": 3}}})),
        "invalid_value"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs,
            "output_config": {"format": {"type": "json_object"}}})),
        "invalid_value"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs, "stop_sequences": [""]})),
        "invalid_value"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs, "mcp_servers": [{"url": "x"}]})),
        "unsupported_parameter"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs, "mcp_servers": []})),
        "ok"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs, "metadata": {"user_id": 7}})),
        "invalid_value"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs,
            "metadata": {"user_id": "u".repeat(513)}})),
        "invalid_value"
    );
    assert_eq!(
        code(json!({"max_tokens": 10, "messages": msgs,
            "massgen": {"deliberation_format": "think_tags"}})),
        "unsupported_parameter"
    );
    let req = parse_json(json!({"max_tokens": 10, "messages": msgs,
        "tools": [{"name": "a", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "tool", "name": "a", "disable_parallel_tool_use": true}}))
    .unwrap();
    assert_eq!(req.tools.choice, Some(ToolChoice::Function("a".into())));
    assert_eq!(req.tools.parallel, Some(false));
}

#[test]
fn a_misshapen_field_is_refused_naming_its_path() {
    let (param, message) = refusal(json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": "x"},
        {"role": "user", "content": [{"type": "document", "source": {}}]}]}));
    assert_eq!(param, "messages[1].content[0].type");
    assert!(message.contains("unknown variant `document`"), "{message}");
    let (param, message) = refusal(json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": 7}]}]}));
    assert_eq!(param, "messages[0].content[0]");
    assert!(
        message.starts_with("'messages[0].content[0]': invalid type"),
        "{message}"
    );
    let (param, _) =
        refusal(json!({"max_tokens": 10, "messages": [{"role": "robot", "content": "x"}]}));
    assert_eq!(param, "messages[0].role");
    let (param, _) =
        refusal(json!({"max_tokens": 10, "messages": [{"role": "user", "content": 3}]}));
    assert_eq!(param, "messages[0].content");
    let (param, _) = refusal(
        json!({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
        "system": [{"type": "image"}]}),
    );
    assert_eq!(param, "system[0].type");
    let (param, message) = refusal(json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}]}));
    assert_eq!(param, "messages[1].content[0]");
    assert!(
        message.contains("'tool_result' block is not supported in assistant turns"),
        "{message}"
    );
    let (param, _) = refusal(
        json!({"max_tokens": 10, "messages": [{"role": "user", "content": "x"}],
        "tool_choice": {"type": "sometimes"}}),
    );
    assert_eq!(param, "tool_choice.type");
    let (param, _) =
        refusal(json!({"max_tokens": "10", "messages": [{"role": "user", "content": "x"}]}));
    assert_eq!(param, "max_tokens");
}

fn with_thinking(thinking: &str, signature: &str) -> Value {
    json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": thinking, "signature": signature},
            {"type": "text", "text": "Because."}]},
        {"role": "user", "content": "And then?"}]})
}

#[test]
fn thinking_blocks_we_signed_are_dropped_and_others_refused() {
    let signature = signer().sign_thinking("agent1 answered");
    let req = parse_json(with_thinking("agent1 answered", &signature)).unwrap();
    assert_eq!(req.messages[1].content, "Because.");
    assert!(parse_json(with_thinking("anything", "")).is_ok());
    for (thinking, signature) in [
        ("agent1 answered, tampered", signature.clone()),
        ("agent1 answered", "EqQBCgIYAhIM".to_string()),
        (
            "agent1 answered",
            Signer::new(Some(&Secret::new("other"))).sign_thinking("agent1 answered"),
        ),
    ] {
        let e = parse_json(with_thinking(thinking, &signature)).unwrap_err();
        assert_eq!(e.param(), Some("messages[1].content[0].signature"));
        assert!(
            e.message()
                .contains("Invalid `signature` in `thinking` block"),
            "{}",
            e.message()
        );
    }
    // Without --reasoning-secret the key is per process: a block from before a restart
    // cannot be told from a forgery, and is dropped like the rest.
    let body = with_thinking("agent1 answered, tampered", &signature);
    assert!(parse(body.to_string().as_bytes(), true, &Signer::new(None)).is_ok());
}

#[test]
fn prompt_tokens_count_system_messages_and_tools() {
    let req = parse(
        json!({"messages": [{"role": "user", "content": "12345678"}]})
            .to_string()
            .as_bytes(),
        false,
        &signer(),
    )
    .unwrap();
    assert_eq!(req.prompt_tokens, 2);
    assert_eq!(req.max_tokens, u64::MAX);
    let req = parse_json(json!({"max_tokens": 5, "system": "abcd",
        "messages": [{"role": "user", "content": "12345678"}],
        "tools": [{"name": "f", "input_schema": {"type": "object"}}]}))
    .unwrap();
    let text = format!("abcd12345678f{}", json!({"type": "object"}));
    assert_eq!(req.prompt_tokens, estimate_tokens(&text));
}

#[test]
fn what_was_always_ignored_when_misshapen_still_is() {
    let msgs = json!([{"role": "user", "content": "x"}]);
    for extra in [
        json!({"mcp_servers": "none"}),
        json!({"tools": [{"type": 3, "name": "a", "description": 5, "input_schema": {}}]}),
        json!({"output_config": {"effort": "high", "task_budget": 9}}),
        json!({"thinking": {"type": "enabled", "budget_tokens": 1024}, "top_k": 3}),
    ] {
        let mut body = json!({"max_tokens": 10, "messages": msgs});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        assert_eq!(code(body), "ok", "{extra}");
    }
    let req = parse_json(json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "thinking", "signature": 5}, {"type": "text", "text": "y"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}]}]}))
    .unwrap();
    assert_eq!(req.messages[1].content, "y");
    assert_eq!(req.messages[2].content, "");
    // An array where an object belongs is not read by position.
    let (param, _) = refusal(json!({"max_tokens": 10, "messages": [["user", "x"]]}));
    assert_eq!(param, "messages[0]");
    let (param, _) = refusal(json!({"max_tokens": 10, "messages": [
        {"role": "user", "content": [["text", "x"]]}]}));
    assert_eq!(param, "messages[0].content[0]");
}
