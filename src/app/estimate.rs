//! What a session's first round can cost, before it starts: every agent's first call runs at
//! once, and the engine can only stop calls once their usage is counted, so a session
//! spends at least that round whatever its own limit. A key's daily allowance reserves it
//! ([`crate::app::spend`]), so requests with a tiny `max_cost_usd` cannot each run a whole
//! round on a reservation of nothing.
//!
//! Per agent: its price of the prompt (the request's text, its system text and tools, the
//! agent's system message, and a fixed allowance for the coordination prompt and workflow
//! tools, at 4 bytes a token, about English's rate) and of its output cap (the agent's `max_tokens` /
//! `max_output_tokens` / `max_completion_tokens`, else [`DEFAULT_OUTPUT_TOKENS`]). Images
//! count [`IMAGE_TOKENS`] each. An agent without a price adds nothing (a limit with an
//! unpriced agent is refused before this matters).

use massgen_core::coordination::SessionInput;
use massgen_core::provider::{Message, Usage};

use crate::config::PanelConfig;

/// The output a first call is counted for when its agent sets no cap: a long answer
/// (most first answers are under 2,000 tokens). Reasoning models that think longer than
/// this can overshoot a key's day by what they write past it (docs/security.md).
pub const DEFAULT_OUTPUT_TOKENS: u64 = 4_096;
/// The coordination prompt and workflow tools every first call carries, in tokens (about
/// 1,500 bytes of prompt and schemas; the simulator counts 190).
const PROMPT_OVERHEAD_TOKENS: u64 = 400;
/// An image, in tokens (a large image in OpenAI's and Anthropic's accounting).
const IMAGE_TOKENS: u64 = 1_600;
/// Bytes per token, about English's rate in the providers' tokenizers.
const BYTES_PER_TOKEN: u64 = 4;

/// USD the first round of a session of `panel` on `input` can cost.
pub fn first_round_usd(panel: &PanelConfig, input: &SessionInput) -> f64 {
    let shared = input_tokens(input);
    panel
        .agents
        .iter()
        .filter_map(|agent| {
            let price = agent.backend.price?;
            let system = agent.system_message.as_ref().map_or(0, |s| tokens(s.len()));
            let output = output_cap(&agent.backend.params).unwrap_or(DEFAULT_OUTPUT_TOKENS);
            let input_tokens = shared + system + PROMPT_OVERHEAD_TOKENS;
            Some(price.cost(&Usage {
                input_tokens,
                output_tokens: output,
                total_tokens: input_tokens + output,
                ..Usage::default()
            }))
        })
        .sum()
}

/// The agent's configured output cap, under any of the names the providers use.
fn output_cap(params: &serde_json::Map<String, serde_json::Value>) -> Option<u64> {
    ["max_tokens", "max_output_tokens", "max_completion_tokens"]
        .iter()
        .filter_map(|k| params.get(*k)?.as_u64())
        .min()
}

fn input_tokens(input: &SessionInput) -> u64 {
    let messages = input
        .history
        .iter()
        .chain(&input.followup)
        .map(message_tokens)
        .sum::<u64>();
    let tools = input
        .tools
        .tools
        .iter()
        .map(|t| tokens(t.name.len() + t.description.len() + t.parameters.to_string().len()))
        .sum::<u64>();
    messages
        + tokens(input.question.len())
        + IMAGE_TOKENS * input.question_images.len() as u64
        + input.extra_system.as_ref().map_or(0, |s| tokens(s.len()))
        + tools
}

fn message_tokens(message: &Message) -> u64 {
    let calls: usize = message
        .tool_calls
        .iter()
        .map(|c| c.name.len() + c.arguments.len())
        .sum();
    tokens(message.content.len() + calls) + IMAGE_TOKENS * message.images.len() as u64
}

fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AgentConfig, BackendConfig};
    use massgen_core::provider::Price;

    fn agent(price: Option<Price>, params: serde_json::Value) -> AgentConfig {
        AgentConfig {
            id: "a".into(),
            system_message: None,
            backend: BackendConfig {
                backend_type: "openai".into(),
                model: "m".into(),
                api_key: None,
                base_url: "http://127.0.0.1:1/v1".into(),
                params: params.as_object().cloned().unwrap_or_default(),
                api_version: None,
                price,
                vision: false,
                http: massgen_providers::UpstreamHttp::default(),
            },
            tools: None,
        }
    }

    #[test]
    fn the_first_round_counts_every_priced_agents_prompt_and_output_cap() {
        let price = Price {
            input_per_million: 2.0,
            output_per_million: 8.0,
            cached_input_per_million: 0.5,
        };
        let panel = PanelConfig {
            agents: vec![
                agent(Some(price), serde_json::json!({})),
                agent(Some(price), serde_json::json!({"max_tokens": 100})),
                agent(None, serde_json::json!({})),
            ],
            name: "p".into(),
            source: "p.yaml".into(),
            orchestrator: Default::default(),
            call_policy: Default::default(),
        };
        let input = SessionInput {
            question: "x".repeat(4_000),
            ..SessionInput::default()
        };
        // Prompt: 1,000 question tokens + 400 overhead, per priced agent.
        let prompt = 2.0 * 1_400.0 / 1e6;
        let expected = (prompt + 8.0 * 4_096.0 / 1e6) + (prompt + 8.0 * 100.0 / 1e6);
        assert!((first_round_usd(&panel, &input) - expected).abs() < 1e-12);
    }
}
