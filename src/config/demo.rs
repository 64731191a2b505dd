//! The built-in `--demo` panel: three simulated agents on the in-process mock upstream.

use std::path::PathBuf;

use massgen_core::coordination::OrchestratorOptions;
use massgen_providers::retry::CallPolicy;
use serde_json::Map;

use super::{AgentConfig, BackendConfig, PanelConfig};

/// `source` of the demo panel, for messages.
pub const DEMO_SOURCE: &str = "<built-in demo>";

/// Three `chatcompletion` agents on `mock_base_url` (e.g. `http://127.0.0.1:PORT/v1`).
/// The model names use the simulator's `<name>:key=value,…` grammar: staggered first-token
/// delays and token speeds make the deliberation visible, and every agent votes for agent2
/// so the demo always reaches consensus.
pub fn demo_panel(mock_base_url: &str) -> PanelConfig {
    let base_url = mock_base_url.trim_end_matches('/');
    let agent = |id: &str, model: &str, role: &str| AgentConfig {
        id: id.to_string(),
        system_message: Some(role.to_string()),
        backend: BackendConfig {
            backend_type: "chatcompletion".to_string(),
            model: model.to_string(),
            api_key: None,
            base_url: base_url.to_string(),
            params: Map::new(),
            api_version: None,
            // The simulator charges nothing, and says so by having no price.
            price: None,
            // The simulator takes images (and answers without looking at them), so the
            // demo shows what a panel of seeing models does with them.
            vision: true,
            http: massgen_providers::UpstreamHttp::Negotiated,
        },
        tools: None,
    };
    PanelConfig {
        name: "demo".to_string(),
        source: PathBuf::from(DEMO_SOURCE),
        agents: vec![
            agent(
                "sim-analyst",
                "sim-analyst:ttft_ms=600,token_ms=30,vote=agent2",
                "You are the analyst: break the question into parts and answer each with facts.",
            ),
            agent(
                "sim-critic",
                "sim-critic:ttft_ms=900,token_ms=25,vote=agent2",
                "You are the critic: look for mistakes and gaps in the answers so far and fix them.",
            ),
            agent(
                "sim-synthesizer",
                "sim-synthesizer:ttft_ms=1200,token_ms=20,vote=agent2",
                "You are the synthesizer: combine the best points into one clear, complete answer.",
            ),
        ],
        orchestrator: OrchestratorOptions::default(),
        call_policy: CallPolicy::default(),
    }
}
