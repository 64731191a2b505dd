//! What a failed session says about its upstreams. Their own words stay out of the
//! top-level `message`: proxies in front of us (LiteLLM) classify an error by its message
//! text, and "Rate limit reached" quoted inside our 502 made one treat it as its own 429.
//! Each agent's upstream failure goes to a separate `upstream` list instead.

use massgen_core::coordination::{AgentError, AgentErrorKind, SessionError, SessionErrorKind};
use serde_json::{Value, json};

/// The longest upstream message excerpt passed on, in characters. The provider layer
/// already removed the key it sent and cut the body; this keeps error bodies small.
pub const MAX_EXCERPT_CHARS: usize = 300;

fn is_upstream(a: &AgentError) -> bool {
    a.kind == AgentErrorKind::Upstream
}

/// The top-level message: ours only. The agents whose upstream failed are named; why is
/// in [`details`].
pub fn message(e: &SessionError) -> String {
    let ours: Vec<String> = e
        .agent_errors
        .iter()
        .filter(|a| !is_upstream(a))
        .map(|a| format!("{} ({}): {}", a.agent.label, a.agent.agent_id, a.message))
        .collect();
    let failed: Vec<String> = e
        .agent_errors
        .iter()
        .filter(|a| is_upstream(a))
        .map(|a| format!("{} ({})", a.agent.label, a.agent.agent_id))
        .collect();
    // The engine's own message for these lists each agent's upstream message.
    let head = if e.kind == SessionErrorKind::UpstreamFailed {
        "The panel could not continue".to_string()
    } else {
        e.message.clone()
    };
    let mut parts = vec![head];
    if !failed.is_empty() {
        parts.push(format!(
            "the upstream calls of {} failed (each upstream's answer is in error.upstream)",
            failed.join(", ")
        ));
    }
    if !ours.is_empty() {
        parts.push(format!("[{}]", ours.join("; ")));
    }
    parts.join(": ")
}

/// One entry per agent whose upstream failed: which agent, which provider, the HTTP
/// status and our classification, and a bounded excerpt of what the upstream said.
pub fn details(e: &SessionError) -> Vec<Value> {
    e.agent_errors
        .iter()
        .filter(|a| is_upstream(a))
        .map(|a| {
            json!({
                "agent_id": a.agent.agent_id,
                "label": a.agent.label,
                "provider": a.provider,
                "status": a.status,
                "kind": a.upstream_kind,
                "message": excerpt(&a.message),
            })
        })
        .collect()
}

fn excerpt(text: &str) -> String {
    match text.char_indices().nth(MAX_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use massgen_core::coordination::AgentRef;
    use massgen_core::provider::{ProviderErrorKind, Usage};

    fn agent(id: &str, kind: AgentErrorKind, message: &str) -> AgentError {
        let upstream = kind == AgentErrorKind::Upstream;
        AgentError {
            agent: AgentRef {
                agent_id: id.into(),
                label: format!("L{id}"),
            },
            kind,
            message: message.into(),
            provider: upstream.then(|| "openai".into()),
            status: upstream.then_some(429),
            upstream_kind: upstream.then_some(ProviderErrorKind::RateLimited),
            retry_after_ms: None,
            retry_can_help: upstream.then_some(true),
        }
    }

    #[test]
    fn upstream_words_stay_out_of_the_message_and_are_cut_in_the_details() {
        let long = format!("Rate limit reached for gpt-4o {}", "x".repeat(1000));
        let e = SessionError {
            kind: SessionErrorKind::UpstreamFailed,
            message: format!("every agent failed: a1: {long}"),
            agent_errors: vec![
                agent("a1", AgentErrorKind::Upstream, &long),
                agent("a2", AgentErrorKind::InvalidTurns, "no tool call"),
            ],
            usage: Usage::default(),
            cost_usd: None,
        };
        let m = message(&e);
        assert!(!m.to_lowercase().contains("rate limit"), "{m}");
        assert!(
            m.contains("La1 (a1)") && m.contains("La2 (a2): no tool call"),
            "{m}"
        );
        let d = details(&e);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0]["agent_id"], "a1");
        assert_eq!(d[0]["status"], 429);
        assert_eq!(d[0]["kind"], "rate_limited");
        let text = d[0]["message"].as_str().unwrap_or_default();
        assert!(text.starts_with("Rate limit reached"));
        assert_eq!(text.chars().count(), MAX_EXCERPT_CHARS + 1);
    }
}
