//! List prices of the models in `configs/` and the presets' flagship models, in USD per
//! million tokens, so a session can report what it cost. A config overrides them per agent
//! (`backend.pricing`); a model not listed has no price, and its cost is reported as
//! unknown, never as zero.
//!
//! Prices as published on the providers' own pricing pages, as of October 2025:
//! - OpenAI: https://openai.com/api/pricing (standard tier; cached input as listed)
//! - Anthropic: https://docs.anthropic.com/en/docs/about-claude/pricing (cache reads at
//!   0.1× input; cache writes are counted as plain input, at 1× instead of 1.25×)
//! - Google: https://ai.google.dev/gemini-api/docs/pricing (paid tier, prompts up to 200k
//!   tokens; thinking tokens are output)
//! - xAI: https://docs.x.ai/docs/models
//! - Groq: https://groq.com/pricing (no cached-input discount)
//! - DeepSeek: https://api-docs.deepseek.com/quick_start/pricing (cache hit / miss);
//!   OpenRouter's `deepseek/deepseek-chat` is priced here at DeepSeek's own list price:
//!   OpenRouter passes on the price of the provider it routes to, which may differ
//! - Together: https://www.together.ai/pricing; Fireworks: https://fireworks.ai/pricing;
//!   Cerebras: https://www.cerebras.ai/pricing; Moonshot: https://platform.moonshot.ai
//!   (kimi-k2); Z.ai: https://docs.z.ai/guides/overview/pricing
//!
//! Prices change: check them before relying on a budget, and set `backend.pricing` where
//! your contract differs.

use massgen_core::provider::Price;

/// `(model, input, cached input, output)` per million tokens.
const TABLE: &[(&str, f64, f64, f64)] = &[
    // OpenAI
    ("gpt-5", 1.25, 0.125, 10.0),
    ("gpt-5-mini", 0.25, 0.025, 2.0),
    ("gpt-5-nano", 0.05, 0.005, 0.40),
    ("gpt-4.1", 2.0, 0.50, 8.0),
    ("gpt-4.1-mini", 0.40, 0.10, 1.60),
    ("gpt-4.1-nano", 0.10, 0.025, 0.40),
    ("gpt-4o", 2.50, 1.25, 10.0),
    ("gpt-4o-mini", 0.15, 0.075, 0.60),
    ("o3", 2.0, 0.50, 8.0),
    ("o4-mini", 1.10, 0.275, 4.40),
    // Anthropic
    ("claude-opus-4-1", 15.0, 1.50, 75.0),
    ("claude-opus-4", 15.0, 1.50, 75.0),
    ("claude-sonnet-4-5", 3.0, 0.30, 15.0),
    ("claude-sonnet-4", 3.0, 0.30, 15.0),
    ("claude-haiku-4-5", 1.0, 0.10, 5.0),
    ("claude-3-5-haiku", 0.80, 0.08, 4.0),
    // Google
    ("gemini-2.5-pro", 1.25, 0.31, 10.0),
    ("gemini-2.5-flash", 0.30, 0.075, 2.50),
    ("gemini-2.5-flash-lite", 0.10, 0.025, 0.40),
    // xAI
    ("grok-4", 3.0, 0.75, 15.0),
    ("grok-3-mini", 0.30, 0.075, 0.50),
    // Groq
    ("llama-3.3-70b-versatile", 0.59, 0.59, 0.79),
    ("llama-3.1-8b-instant", 0.05, 0.05, 0.08),
    // DeepSeek (V3.2, from 2025-09-29)
    ("deepseek-chat", 0.28, 0.028, 0.42),
    ("deepseek-reasoner", 0.28, 0.028, 0.42),
    // Together, Fireworks, Cerebras
    ("meta-llama/llama-3.3-70b-instruct-turbo", 0.88, 0.88, 0.88),
    (
        "accounts/fireworks/models/llama-v3p3-70b-instruct",
        0.90,
        0.90,
        0.90,
    ),
    ("llama-3.3-70b", 0.85, 0.85, 1.20),
    // Moonshot, Z.ai
    ("kimi-k2-0905-preview", 0.60, 0.15, 2.50),
    ("glm-4.6", 0.60, 0.11, 2.20),
];

/// The list price of `model`, if the table has it. Matching ignores case, a dated
/// snapshot suffix (`-2024-07-18`, `-20250929`) and, for routed names such as OpenRouter's
/// `deepseek/deepseek-chat` or `openai/gpt-4o-mini`, the vendor prefix.
pub fn list_price(model: &str) -> Option<Price> {
    let model = model.trim().to_ascii_lowercase();
    let undated = without_snapshot(&model);
    let unrouted = undated.rsplit_once('/').map(|(_, name)| name);
    [Some(model.as_str()), Some(undated), unrouted]
        .into_iter()
        .flatten()
        .find_map(|name| TABLE.iter().find(|row| row.0 == name))
        .map(|&(_, input, cached, output)| Price {
            input_per_million: input,
            output_per_million: output,
            cached_input_per_million: cached,
        })
}

/// `name` without a trailing `-YYYY-MM-DD` or `-YYYYMMDD`.
fn without_snapshot(name: &str) -> &str {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let parts: Vec<&str> = name.rsplitn(4, '-').collect();
    if let [d, m, y, rest] = parts.as_slice()
        && y.len() == 4
        && m.len() == 2
        && d.len() == 2
        && [d, m, y].iter().all(|p| digits(p))
    {
        return rest;
    }
    match name.rsplit_once('-') {
        Some((rest, date)) if date.len() == 8 && digits(date) => rest,
        _ => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configs_models_have_prices() {
        for model in [
            "gpt-4o-mini",
            "gpt-5-mini",
            "claude-sonnet-4-5",
            "gemini-2.5-flash",
            "llama-3.3-70b-versatile",
            "deepseek/deepseek-chat",
        ] {
            assert!(list_price(model).is_some(), "{model}");
        }
    }

    #[test]
    fn snapshots_case_and_routing_prefixes_are_ignored() {
        let mini = list_price("gpt-4o-mini");
        assert_eq!(list_price("gpt-4o-mini-2024-07-18"), mini);
        assert_eq!(list_price("GPT-4o-Mini"), mini);
        assert_eq!(list_price("openai/gpt-4o-mini"), mini);
        assert_eq!(
            list_price("claude-sonnet-4-5-20250929"),
            list_price("claude-sonnet-4-5")
        );
        let price = list_price("claude-sonnet-4-5").unwrap();
        assert_eq!(price.input_per_million, 3.0);
        assert_eq!(price.cached_input_per_million, 0.30);
        assert_eq!(price.output_per_million, 15.0);
        // A longer name is another model, not a snapshot.
        assert_ne!(list_price("gpt-4o-mini"), list_price("gpt-4o"));
    }

    #[test]
    fn unknown_models_have_no_price() {
        for model in [
            "llama3.2",
            "Qwen/Qwen2.5-7B-Instruct",
            "sim-a:ttft_ms=300",
            "my-model",
            "",
        ] {
            assert_eq!(list_price(model), None, "{model}");
        }
    }
}
