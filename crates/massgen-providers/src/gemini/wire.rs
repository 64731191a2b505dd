//! Serde shapes of Gemini `GenerateContentResponse` stream chunks and Google error bodies.

use serde::Deserialize;
use serde_json::Value;

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChunkWire {
    #[serde(default)]
    pub candidates: Option<Vec<CandidateWire>>,
    #[serde(default)]
    pub usage_metadata: Option<UsageWire>,
    #[serde(default)]
    pub prompt_feedback: Option<PromptFeedbackWire>,
    /// An error inside an HTTP 200 stream.
    #[serde(default)]
    pub error: Option<ErrorWire>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CandidateWire {
    #[serde(default)]
    pub index: Option<u32>,
    #[serde(default)]
    pub content: Option<ContentWire>,
    #[serde(default)]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ContentWire {
    #[serde(default)]
    pub parts: Option<Vec<PartWire>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PartWire {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub thought: Option<bool>,
    #[serde(default)]
    pub thought_signature: Option<String>,
    #[serde(default)]
    pub function_call: Option<FunctionCallWire>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FunctionCallWire {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// An object (never a string, unlike OpenAI).
    #[serde(default)]
    pub args: Option<Value>,
    /// Vertex `streamFunctionCallArguments`: argument values arriving piecewise.
    #[serde(default)]
    pub partial_args: Option<Vec<PartialArgWire>>,
    #[serde(default)]
    pub will_continue: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PartialArgWire {
    #[serde(default)]
    pub json_path: Option<String>,
    #[serde(default)]
    pub string_value: Option<String>,
    #[serde(default)]
    pub number_value: Option<Value>,
    #[serde(default)]
    pub bool_value: Option<bool>,
}

#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UsageWire {
    #[serde(default)]
    pub prompt_token_count: Option<u64>,
    #[serde(default)]
    pub candidates_token_count: Option<u64>,
    #[serde(default)]
    pub total_token_count: Option<u64>,
    #[serde(default)]
    pub cached_content_token_count: Option<u64>,
    #[serde(default)]
    pub thoughts_token_count: Option<u64>,
    #[serde(default)]
    pub tool_use_prompt_token_count: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PromptFeedbackWire {
    #[serde(default)]
    pub block_reason: Option<String>,
}

/// `{"error":{"code":400,"message","status":"INVALID_ARGUMENT","details":[…]}}`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorBodyWire {
    #[serde(default)]
    pub error: Option<ErrorWire>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorWire {
    #[serde(default)]
    pub code: Option<u16>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub details: Option<Vec<Value>>,
}
