//! The request table of the Chat Completions door: what is read, refused and ignored, and
//! where a 400 says the fault is.

use super::*;

fn parse_json(v: Value) -> Result<ChatRequest, ApiError> {
    parse(v.to_string().as_bytes())
}

#[test]
fn the_shared_fields_are_not_the_doors_own() {
    assert!(parse::overlap::<Body, Bounds>().is_empty());
}

#[test]
fn splits_system_history_and_question() {
    let req = parse_json(serde_json::json!({
        "model": "massgen",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"},
            {"role": "user", "content": [{"type": "text", "text": "What is 2+2?"}]}
        ],
        "unknown_field": 1
    }))
    .unwrap();
    assert_eq!(req.input.question, "What is 2+2?");
    assert_eq!(req.input.extra_system.as_deref(), Some("Be brief."));
    assert_eq!(req.input.history.len(), 2);
    assert!(!req.stream);
}

#[test]
fn rejects_bad_inputs_with_codes() {
    let code = |v: Value| match parse_json(v) {
        Err(e) => e.code(),
        Ok(_) => "ok",
    };
    assert_eq!(
        code(serde_json::json!({"model": "massgen"})),
        "missing_required_parameter"
    );
    assert_eq!(code(serde_json::json!({"messages": []})), "empty_array");
    assert_eq!(
        code(serde_json::json!({"messages": [{"role": "assistant", "content": "x"}]})),
        "missing_user_message"
    );
    assert_eq!(
        code(
            serde_json::json!({"messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "function", "function": {"name": "vote"}}]})
        ),
        "tool_name_collision"
    );
    assert_eq!(
        code(
            serde_json::json!({"messages": [{"role": "user", "content": "x"}], "massgen": {"deliberation": "loud"}})
        ),
        "invalid_value"
    );
    assert_eq!(
        parse(b"{not json").err().map(|e| e.code()),
        Some("invalid_json")
    );
}

/// Each row of docs/doors.md's Chat Completions request table that refuses or bounds.
#[test]
fn what_a_panel_cannot_honour_is_refused_and_bounds_are_read() {
    let with = |extra: Value| {
        let mut body = serde_json::json!({"messages": [{"role": "user", "content": "x"}]});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        parse_json(body)
    };
    let code = |extra: Value| match with(extra) {
        Err(e) => e.code(),
        Ok(_) => "ok",
    };
    use serde_json::json;
    for refused in [
        json!({"n": 2}),
        json!({"logprobs": true}),
        json!({"top_logprobs": 2}),
        json!({"modalities": ["text", "audio"]}),
        json!({"audio": {"voice": "alloy", "format": "wav"}}),
        json!({"web_search_options": {}}),
        json!({"functions": [{"name": "f", "parameters": {}}]}),
        json!({"function_call": "auto"}),
    ] {
        assert_eq!(code(refused.clone()), "unsupported_parameter", "{refused}");
    }
    // What the panel config owns, and the neutral values of the refused fields.
    assert_eq!(
        code(
            json!({"response_format": {"type": "text"}, "n": 1, "logprobs": false,
            "modalities": ["text"], "temperature": 0.2, "top_p": 0.9, "seed": 7,
            "presence_penalty": 0.1, "frequency_penalty": 0.1, "reasoning_effort": "low",
            "service_tier": "auto", "user": "u", "store": true, "metadata": {"a": "b"}})
        ),
        "ok"
    );
    let req = with(json!({"max_tokens": 7, "stop": "END"})).unwrap();
    assert_eq!(
        (req.max_tokens, req.stop),
        (Some(7), vec!["END".to_string()])
    );
    let req =
        with(json!({"max_completion_tokens": 5, "max_tokens": 7, "stop": ["a", "b"]})).unwrap();
    assert_eq!((req.max_tokens, req.stop.len()), (Some(5), 2));
    assert_eq!(code(json!({"max_completion_tokens": 0})), "invalid_value");
    assert_eq!(
        code(json!({"stop": ["a", "b", "c", "d", "e"]})),
        "invalid_value"
    );
    assert_eq!(code(json!({"stop": [""]})), "invalid_value");
    assert_eq!(code(json!({"stop": 3})), "invalid_type");
}

#[test]
fn image_parts_of_user_messages_become_images() {
    use massgen_core::provider::ImageSource;
    use serde_json::json;
    let png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";
    let image =
        |url: &str| json!({"type": "image_url", "image_url": {"url": url, "detail": "high"}});
    let req = parse_json(json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"},
            image(&format!("data:image/png;base64,{png}"))]},
        {"role": "assistant", "content": "A dot."},
        {"role": "user", "content": [image("https://example.com/b.jpg"),
            {"type": "image_url", "image_url": "https://example.com/c.webp"}]}
    ]}))
    .unwrap();
    assert_eq!(req.input.history[0].images.len(), 1);
    assert_eq!(
        req.input.history[0].images[0].detail.as_deref(),
        Some("high")
    );
    assert_eq!(req.input.question, "", "an image alone is a question");
    assert_eq!(
        req.input.question_images[1].source,
        ImageSource::Url {
            url: "https://example.com/c.webp".into()
        }
    );
    let refused = |messages: Value| match parse_json(json!({"messages": messages})) {
        Err(e) => (e.code(), e.message()),
        Ok(_) => ("ok", String::new()),
    };
    let (code, message) =
        refused(json!([{"role": "user", "content": [image("http://example.com/a.png")]}]));
    assert_eq!(code, "invalid_image_url");
    assert!(
        message.contains("messages[0]") && message.contains("https"),
        "{message}"
    );
    let (code, _) = refused(
        json!([{"role": "system", "content": [image("https://example.com/a.png")]},
        {"role": "user", "content": "x"}]),
    );
    assert_eq!(code, "invalid_message");
    let many: Vec<Value> = (0..=images::MAX_IMAGES)
        .map(|_| image("https://example.com/a.png"))
        .collect();
    let (code, message) = refused(json!([{"role": "user", "content": many}]));
    assert_eq!(code, "too_many_images");
    assert!(
        message.contains(&images::MAX_IMAGES.to_string()),
        "{message}"
    );
    let (code, _) = refused(json!([{"role": "user", "content": [{"type": "image_url"}]}]));
    assert_eq!(code, "invalid_message");
}

#[test]
fn tool_messages_take_text_and_image_parts() {
    let req = parse_json(serde_json::json!({"messages": [
        {"role": "user", "content": "What does the page look like?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "screenshot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [
            {"type": "text", "text": "the page"},
            {"type": "image_url", "image_url": {"url": "https://example.com/shot.png"}}]}
    ]}))
    .unwrap();
    let result = &req.input.followup[1];
    assert_eq!(result.content, "the page");
    assert_eq!(result.images.len(), 1);
    let e = parse_json(serde_json::json!({"messages": [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}
    ]}))
    .unwrap_err();
    assert!(
        e.message()
            .contains("images are accepted in user and tool messages only"),
        "{}",
        e.message()
    );
}

#[test]
fn client_tools_choice_and_followup() {
    let tool = |n: &str| serde_json::json!({"type": "function", "function": {"name": n, "parameters": {"type": "object"}}});
    let req = parse_json(serde_json::json!({
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "18C"}
        ],
        "tools": [tool("get_weather")],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "parallel_tool_calls": false
    }))
    .unwrap();
    assert_eq!(req.input.question, "Weather in Paris?");
    assert!(req.input.history.is_empty());
    assert_eq!(req.input.followup.len(), 2);
    assert_eq!(req.input.tools.tools[0].name, "get_weather");
    assert_eq!(
        req.input.tools.choice,
        Some(ToolChoice::Function("get_weather".into()))
    );
    assert_eq!(req.input.tools.parallel, Some(false));
    let code = |v: Value| match parse_json(v) {
        Err(e) => e.code(),
        Ok(_) => "ok",
    };
    let msgs = serde_json::json!([{"role": "user", "content": "x"}]);
    // The client's own MCP tools (Claude Code's names) are the client's.
    assert_eq!(
        code(serde_json::json!({"messages": msgs, "tools": [tool("mcp__a__b")]})),
        "ok"
    );
    assert_eq!(
        code(serde_json::json!({"messages": msgs, "tools": [tool("new_answer")]})),
        "tool_name_collision"
    );
    assert_eq!(
        code(serde_json::json!({"messages": msgs, "tools": [tool("a"), tool("a")]})),
        "invalid_value"
    );
    assert_eq!(
        code(serde_json::json!({"messages": msgs, "tools": [tool("a b")]})),
        "invalid_value"
    );
    assert_eq!(
        code(serde_json::json!({"messages": msgs, "tools": [tool("a")],
            "tool_choice": {"type": "function", "function": {"name": "b"}}})),
        "invalid_value"
    );
    assert_eq!(
        code(serde_json::json!({"messages": msgs, "tool_choice": "required"})),
        "invalid_value"
    );
    assert_eq!(
        code(serde_json::json!({"messages": msgs, "tools": [tool("a")], "tool_choice": "none"})),
        "ok"
    );
}

/// `(code, param, message)` of the 400 for `messages` and the other fields of `extra`.
fn refusal(messages: Value, extra: Value) -> (&'static str, String, String) {
    let mut body = serde_json::json!({ "messages": messages });
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    match parse_json(body) {
        Err(e) => (e.code(), e.param().unwrap_or("").to_string(), e.message()),
        Ok(_) => ("ok", String::new(), String::new()),
    }
}

#[test]
fn a_400_names_the_json_path_of_the_field_at_fault() {
    use serde_json::json;
    let user = json!([{"role": "user", "content": "x"}]);
    let image = |image_url: Value| {
        json!([{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
            {"role": "user", "content": [{"type": "image_url", "image_url": image_url}]}])
    };
    let cases = [
        // Inside a message: `invalid_message`, as every fault of a message always was.
        (
            image(json!(5)),
            json!({}),
            "messages[2].content[0].image_url",
            "invalid_message",
        ),
        (
            image(json!({"url": 7})),
            json!({}),
            "messages[2].content[0].image_url.url",
            "invalid_message",
        ),
        (
            image(json!({})),
            json!({}),
            "messages[2].content[0].image_url.url",
            "invalid_message",
        ),
        (
            json!([{"role": "user", "content": [{"type": "text", "text": 42}]}]),
            json!({}),
            "messages[0].content[0].text",
            "invalid_message",
        ),
        (
            json!([{"role": "user", "content": [{"text": "t"}]}]),
            json!({}),
            "messages[0].content[0]",
            "invalid_message",
        ),
        (
            json!([{"role": "user", "content": [{"type": "input_audio"}]}]),
            json!({}),
            "messages[0].content[0]",
            "invalid_message",
        ),
        (
            json!([{"role": "user", "content": 5}]),
            json!({}),
            "messages[0].content",
            "invalid_message",
        ),
        (
            json!([{"role": 5, "content": "x"}]),
            json!({}),
            "messages[0].role",
            "invalid_message",
        ),
        (
            json!([{"role": "bot", "content": "x"}]),
            json!({}),
            "messages[0].role",
            "invalid_message",
        ),
        (
            json!([{"content": "x"}]),
            json!({}),
            "messages[0]",
            "invalid_message",
        ),
        (json!(["hi"]), json!({}), "messages[0]", "invalid_message"),
        // A derived struct would read an array by position: not here.
        (
            json!([["user", "hi"]]),
            json!({}),
            "messages[0]",
            "invalid_message",
        ),
        (
            json!([{"role": "assistant", "content": "a", "tool_calls": {}},
            {"role": "user", "content": "x"}]),
            json!({}),
            "messages[0].tool_calls",
            "invalid_message",
        ),
        // Elsewhere: the field, `invalid_type` for a value of the wrong JSON type.
        (json!("hi"), json!({}), "messages", "invalid_type"),
        (user.clone(), json!({"model": 5}), "model", "invalid_type"),
        (
            user.clone(),
            json!({"stream": "yes"}),
            "stream",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"logprobs": "no"}),
            "logprobs",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"stream_options": [true]}),
            "stream_options",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"stream_options": {"include_usage": "x"}}),
            "stream_options.include_usage",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"response_format": ["json_object"]}),
            "response_format",
            "invalid_type",
        ),
        (user.clone(), json!({"tools": {}}), "tools", "invalid_type"),
        (
            user.clone(),
            json!({"tools": ["get_weather"]}),
            "tools[0]",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"tool_choice": 5}),
            "tool_choice",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"tool_choice": ["auto"]}),
            "tool_choice",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"parallel_tool_calls": "no"}),
            "parallel_tool_calls",
            "invalid_type",
        ),
        (
            user.clone(),
            json!({"massgen": 3}),
            "massgen",
            "invalid_type",
        ),
    ];
    for (messages, extra, path, code) in cases {
        let case = format!("{messages} {extra}");
        let (got, param, message) = refusal(messages, extra);
        assert_eq!((got, param.as_str()), (code, path), "{case}: {message}");
        assert!(
            message.starts_with(&format!("'{path}'")),
            "{case}: {message}"
        );
        assert!(
            !message.contains("line 1") && !message.contains("Wire"),
            "{message}"
        );
    }
}

/// What the door has always read leniently stays so: clients echo odd values in fields
/// nothing depends on.
#[test]
fn fields_nothing_depends_on_are_read_leniently() {
    use serde_json::json;
    let req = parse_json(json!({
        "messages": [
            {"role": "user", "content": "Weather?", "name": "ann"},
            {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": 5, "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": null}]},
            {"role": "tool", "tool_call_id": null, "content": [{"type": "input_text", "text": "18C"}]}
        ],
        "tools": [{"function": {"name": "get_weather", "description": 7, "parameters": null}}],
        "n": "2", "modalities": "audio", "user": 1, "store": "yes", "metadata": [],
        "stream_options": {"include_usage": null, "include_obfuscation": false},
        "response_format": null, "tool_choice": null
    }))
    .unwrap();
    let calls = &req.input.followup[0].tool_calls;
    assert_eq!(
        (calls[0].id.as_str(), calls[0].name.as_str()),
        ("", "get_weather")
    );
    assert_eq!(
        calls[0].arguments, "",
        "arguments that are not a string read as none"
    );
    assert_eq!(calls[1].name, "");
    assert_eq!(req.input.followup[1].content, "18C");
    assert_eq!(req.input.tools.tools[0].description, "");
    assert!(!req.include_usage && req.input.output.is_none());
    // The refusals these fields share with the rest keep their codes and params.
    let user = json!([{"role": "user", "content": "x"}]);
    for (extra, code, param) in [
        (
            json!({"tool_choice": {"type": "function", "function": {"name": 5}}}),
            "invalid_value",
            "tool_choice",
        ),
        (
            json!({"tool_choice": {"type": "function", "function": "f"}}),
            "invalid_value",
            "tool_choice",
        ),
        (
            json!({"tool_choice": "any"}),
            "invalid_value",
            "tool_choice",
        ),
        (
            json!({"tools": [{"type": 5, "function": {"name": "f"}}]}),
            "ok",
            "",
        ),
        (
            json!({"tools": [{"type": "web_search"}]}),
            "invalid_value",
            "tools",
        ),
        (
            json!({"tools": [{"function": {"name": 5}}]}),
            "invalid_value",
            "tools",
        ),
        (
            json!({"tools": [{"function": {"name": "f", "parameters": "x"}}]}),
            "invalid_type",
            "tools",
        ),
        (
            json!({"response_format": {"type": 5}}),
            "invalid_value",
            "response_format",
        ),
        (
            json!({"response_format": {"type": "json_schema"}}),
            "invalid_type",
            "response_format.json_schema",
        ),
        (
            json!({"response_format": {"type": "text", "json_schema": 5}}),
            "ok",
            "",
        ),
        (json!({"max_tokens": "7"}), "invalid_value", "max_tokens"),
        (
            json!({"max_completion_tokens": 5, "max_tokens": "7"}),
            "ok",
            "",
        ),
        (
            json!({"temperature": "hot"}),
            "invalid_value",
            "temperature",
        ),
        (
            json!({"massgen": {"deliberation": 5}}),
            "invalid_value",
            "massgen.deliberation",
        ),
        (
            json!({"n": null, "logprobs": null, "top_logprobs": null, "audio": null,
            "functions": null, "function_call": null, "web_search_options": null}),
            "ok",
            "",
        ),
    ] {
        let (got, p, message) = refusal(user.clone(), extra.clone());
        assert_eq!((got, p.as_str()), (code, param), "{extra}: {message}");
    }
}
