//! The Chat Completions door's second turn, black-box: the real binary on a simulator
//! served in this process behind a layer that records every upstream body, so what the
//! agents were shown is checked as they received it. With `think_tags` the content is the
//! deliberation in `<think>…</think>`, then the answer from its first character, streamed
//! and not alike. Sent back as the assistant turn of the next request (a chat UI does;
//! pydantic-ai renders `reasoning_content` so), the deliberation never reaches the agents,
//! while the answer does.

use serde_json::{Value, json};

use crate::support::recording::{self, Seen, strings};
use crate::support::{FAST, Proc, panel_yaml, parse_sse, post, serve, write};

/// A server whose default panel is three simulated agents (`massgen`) and whose
/// `massgen/solo` is one coordinating alone, on the recording simulator.
struct Panel {
    server: Proc,
    seen: Seen,
    _dir: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Panel {
    async fn start() -> Self {
        let (url, seen, stop) = recording::serve().await;
        let dir = tempfile::tempdir().unwrap();
        let team = write(dir.path(), "team.yaml", &panel_yaml(&url, &FAST, ""));
        let configs = dir.path().join("configs");
        std::fs::create_dir(&configs).unwrap();
        // A coordination of one (a plain call would have no deliberation to show).
        let coordinated = "orchestrator:\n  single_agent_coordination: true\n";
        write(
            &configs,
            "solo.yaml",
            &panel_yaml(&url, &FAST[..1], coordinated),
        );
        let (team, configs) = (team.display().to_string(), configs.display().to_string());
        let server = tokio::task::spawn_blocking(move || {
            serve(&["--config", &team, "--configs-dir", &configs])
        })
        .await
        .unwrap();
        Self {
            server,
            seen,
            _dir: dir,
            _stop: stop,
        }
    }

    /// Every text of the upstream bodies received since the last call.
    fn prompts(&self) -> Vec<String> {
        recording::take(&self.seen)
            .iter()
            .flat_map(|b| strings(b).into_iter().map(str::to_string))
            .collect()
    }

    /// `content` and `reasoning_content` of one turn, streamed or not.
    async fn turn(&self, body: &Value) -> (String, String) {
        let r = post(&self.server.url, "/v1/chat/completions", None, body).await;
        assert_eq!(r.status(), 200, "{body}");
        if body["stream"] == true {
            let sse = parse_sse(&r.text().await.unwrap());
            assert!(sse.done, "{}", sse.raw);
            return (sse.content(), sse.reasoning());
        }
        let v: Value = r.json().await.unwrap();
        let message = &v["choices"][0]["message"];
        let text = |key: &str| message[key].as_str().unwrap_or_default().to_string();
        (text("content"), text("reasoning_content"))
    }
}

const QUESTION: &str = "Why is the sky blue?";
const FOLLOW_UP: &str = "And why are sunsets red?";

fn ask(model: &str, messages: Value, stream: bool, format: &str) -> Value {
    json!({"model": model, "stream": stream, "messages": messages,
        "massgen": {"deliberation_format": format}})
}

/// `<think>\n…</think>` then the answer: (the deliberation, the answer).
fn split_think(content: &str) -> (&str, &str) {
    content
        .strip_prefix("<think>\n")
        .and_then(|inner| inner.split_once("</think>"))
        .unwrap_or_else(|| panic!("not <think>\\n…</think>answer: {content:?}"))
}

#[tokio::test]
async fn think_tags_hold_the_deliberation_then_the_answer_from_its_first_character() {
    let p = Panel::start().await;
    let question = json!([{"role": "user", "content": QUESTION}]);
    // One agent: a deliberation whose lines come in one order, so two sessions match.
    let (streamed, reasoning) = p
        .turn(&ask("massgen/solo", question.clone(), true, "think_tags"))
        .await;
    assert_eq!(reasoning, "", "no reasoning_content beside the tags");
    let (whole, reasoning) = p
        .turn(&ask("massgen/solo", question.clone(), false, "think_tags"))
        .await;
    assert_eq!(reasoning, "");
    assert_eq!(streamed, whole, "streamed and not, the same content");

    let (deliberation, answer) = split_think(&whole);
    assert!(
        deliberation.contains("answered (agent") && deliberation.ends_with('\n'),
        "the block ends on its own line: {deliberation:?}"
    );
    // The answer is the one the reasoning format gives, right after the closing tag.
    let (plain, reasoning) = p
        .turn(&ask("massgen/solo", question, false, "reasoning"))
        .await;
    assert!(!plain.is_empty() && reasoning.contains("answered (agent"));
    assert_eq!(answer, plain, "{whole:?}");
    assert!(!answer.starts_with(char::is_whitespace), "{answer:?}");
}

/// Turn 1 with `think_tags` (streamed and not), its content sent back as the assistant
/// message of turn 2, as chat UIs send it: the agents of turn 2 are shown the answer and
/// not the deliberation.
#[tokio::test]
async fn a_think_tags_turn_sent_back_reaches_the_agents_without_its_deliberation() {
    let p = Panel::start().await;
    for stream in [false, true] {
        let question = json!([{"role": "user", "content": QUESTION}]);
        let (content, _) = p
            .turn(&ask("massgen", question, stream, "think_tags"))
            .await;
        let (deliberation, answer) = split_think(&content);
        assert!(deliberation.contains("voted for"), "{deliberation}");
        p.prompts();

        let history = json!([
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": content},
            {"role": "user", "content": FOLLOW_UP},
        ]);
        let (second, _) = p.turn(&ask("massgen", history, false, "think_tags")).await;
        assert!(!split_think(&second).1.is_empty());
        assert_reached_without_deliberation(&p.prompts(), answer, deliberation);
    }
}

/// pydantic-ai (the model name `massgen`) sends `reasoning_content` back as text: the
/// assistant message `<think>\n{reasoning}\n</think>\n\n{answer}`, or the same as two text
/// parts.
#[tokio::test]
async fn reasoning_sent_back_in_think_tags_by_a_client_never_reaches_the_agents() {
    let p = Panel::start().await;
    let question = json!([{"role": "user", "content": QUESTION}]);
    let (answer, reasoning) = p.turn(&ask("massgen", question, false, "reasoning")).await;
    assert!(reasoning.contains("voted for"), "{reasoning}");
    let rendered = format!("<think>\n{reasoning}\n</think>");
    for assistant in [
        json!(format!("{rendered}\n\n{answer}")),
        json!([{"type": "text", "text": rendered}, {"type": "text", "text": answer}]),
    ] {
        p.prompts();
        let history = json!([
            {"role": "user", "content": QUESTION},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": FOLLOW_UP},
        ]);
        let (second, _) = p.turn(&ask("massgen", history, true, "reasoning")).await;
        assert!(!second.is_empty());
        assert_reached_without_deliberation(&p.prompts(), &answer, &reasoning);
    }
    // What makes the check able to fail: the same lines without the tags are history
    // like any other text, and reach the agents.
    let history = json!([
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": format!("{reasoning}\n{answer}")},
        {"role": "user", "content": FOLLOW_UP},
    ]);
    p.turn(&ask("massgen", history, false, "reasoning")).await;
    let prompts = p.prompts();
    for line in reasoning.lines().filter(|l| !l.trim().is_empty()) {
        assert!(prompts.iter().any(|p| p.contains(line)), "{line:?}");
    }
}

/// The turn-2 prompts hold the earlier answer and the follow-up, and no line of the
/// deliberation nor a think tag.
fn assert_reached_without_deliberation(prompts: &[String], answer: &str, deliberation: &str) {
    let shown = |text: &str| prompts.iter().any(|p| p.contains(text));
    assert!(
        shown(FOLLOW_UP) && shown(answer),
        "turn 2 reached the agents"
    );
    assert!(!shown("<think>") && !shown("</think>"), "{prompts:#?}");
    let lines: Vec<&str> = deliberation
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(lines.len() >= 3, "{deliberation}");
    for line in lines {
        assert!(!shown(line), "{line:?} reached the agents");
    }
}
