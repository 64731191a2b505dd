//! `massgen eval --demo`: the first run takes one command, no key and no network. The
//! panel is `serve --demo`'s three simulated agents on the built-in simulator, each right
//! with its own known probability on a question that carries its truth (`[sim:truth=V]`,
//! docs/simulator.md), so the arms come out different and the report has something to
//! say; the questions are a small bundled set with known answers.

use crate::config::PanelConfig;

/// The bundled questions: arithmetic and facts, each with its answer, its truth for the
/// simulator and a `topic` (metadata, for `--group-by topic`).
pub const QUESTIONS: &str = include_str!("demo.jsonl");

/// How the report names the bundled questions as its data.
pub const DATA: &str = "(the demo's questions)";

/// Each demo agent's accuracy on a question with a known truth, and its draws' seed.
const AGENTS: [(&str, f64, u64); 3] = [
    ("sim-analyst", 0.8, 1),
    ("sim-critic", 0.6, 2),
    ("sim-synthesizer", 0.7, 3),
];

/// What the demo's calls are priced at, per million tokens: a small model's list price,
/// so the cost columns (and `--max-cost-usd`) have something to count. The simulator
/// itself charges nothing.
const PRICE_PER_MILLION: (f64, f64) = (0.15, 0.6);

/// `serve --demo`'s panel on the simulator at `mock_base_url`, its agents quick (an
/// eval asks hundreds of times), right with the probabilities of [`AGENTS`], and priced.
pub fn panel(mock_base_url: &str) -> PanelConfig {
    let mut panel = crate::config::demo_panel(mock_base_url);
    for agent in &mut panel.agents {
        if let Some((id, accuracy, seed)) = AGENTS.iter().find(|(id, ..)| *id == agent.id) {
            agent.backend.model =
                format!("{id}:accuracy={accuracy},seed={seed},ttft_ms=15,token_ms=1,words=30");
            agent.backend.price = Some(massgen_core::provider::Price {
                input_per_million: PRICE_PER_MILLION.0,
                output_per_million: PRICE_PER_MILLION.1,
                cached_input_per_million: PRICE_PER_MILLION.0,
            });
        }
    }
    panel
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;

    #[test]
    fn every_demo_agent_is_simulated_with_an_accuracy_and_a_price() {
        let panel = panel("http://127.0.0.1:9/v1");
        assert_eq!(panel.agents.len(), AGENTS.len());
        for agent in &panel.agents {
            assert!(agent.backend.model.contains(":accuracy="), "{}", agent.id);
            assert!(agent.backend.price.is_some(), "{}", agent.id);
        }
    }

    #[test]
    fn the_bundled_questions_read_and_carry_their_truth() {
        let items = crate::eval::data::parse(QUESTIONS, Some("exact")).unwrap();
        assert!((20..=30).contains(&items.len()), "{}", items.len());
        for item in &items {
            let answer = item.answer.as_ref().and_then(|a| a.as_str()).unwrap();
            assert!(
                item.question_text()
                    .ends_with(&format!("[sim:truth={answer}]")),
                "{item:?}"
            );
            assert!(item.metadata.contains_key("topic"), "{item:?}");
        }
    }
}
