//! A real OpenAI client crate (`async-openai`) against `massgen serve --demo`.

use async_openai::Client;
use async_openai::config::OpenAIConfig;
use async_openai::types::chat::{
    ChatCompletionRequestSystemMessageArgs, ChatCompletionRequestUserMessageArgs,
    CreateChatCompletionRequestArgs, FinishReason,
};
use futures::StreamExt;

use crate::support;

fn client(url: &str) -> Client<OpenAIConfig> {
    Client::with_config(
        OpenAIConfig::new()
            .with_api_base(format!("{url}/v1"))
            .with_api_key("unused"),
    )
}

fn request(stream: bool) -> async_openai::types::chat::CreateChatCompletionRequest {
    CreateChatCompletionRequestArgs::default()
        .model("massgen")
        .stream(stream)
        .messages([
            ChatCompletionRequestSystemMessageArgs::default()
                .content("Answer briefly.")
                .build()
                .unwrap()
                .into(),
            ChatCompletionRequestUserMessageArgs::default()
                .content("What makes a good code review?")
                .build()
                .unwrap()
                .into(),
        ])
        .build()
        .unwrap()
}

#[tokio::test]
async fn async_openai_gets_a_consensus_answer_streaming_and_not() {
    let server = support::serve(&["--demo"]);
    let client = client(&server.url);

    let response = client.chat().create(request(false)).await.unwrap();
    let choice = &response.choices[0];
    let content = choice.message.content.clone().unwrap_or_default();
    assert!(content.starts_with("[simulated final answer]"), "{content}");
    assert_eq!(choice.finish_reason, Some(FinishReason::Stop));
    let usage = response.usage.unwrap();
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );

    let mut stream = client.chat().create_stream(request(true)).await.unwrap();
    let mut text = String::new();
    let mut chunks = 0;
    let mut finish = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        chunks += 1;
        for choice in chunk.choices {
            if let Some(t) = choice.delta.content {
                text.push_str(&t);
            }
            if choice.finish_reason.is_some() {
                finish = choice.finish_reason;
            }
        }
    }
    assert!(chunks > 5, "{chunks}");
    assert!(text.starts_with("[simulated final answer]"), "{text}");
    assert_eq!(finish, Some(FinishReason::Stop));
}
