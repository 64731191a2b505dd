//! The web page in a real headless browser: `massgen serve --demo` (plus a six-agent panel
//! on the simulator in `--configs-dir`) with an API key, driven by `tests/ui/e2e.mjs`
//! (Playwright's `playwright-core` on Debian's Chromium). Skips with a reason when Node.js,
//! Chromium or `tests/ui/node_modules` is missing, unless `MASSGEN_REQUIRE_BROWSER=1`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use massgen_core::coordination::{
    AgentError, AgentErrorKind, AgentRef, Answer, AnswerContent, CallPhase, EventKind,
    SessionError, SessionErrorKind, SessionEvent,
};
use massgen_core::provider::{ProviderErrorKind, ToolCall, Usage};

use massgen::app::Owner;
use massgen::app::evals::{ArmInfo, ArmKind, ItemResult, Member};
use massgen::app::store::RecordDb;
use massgen::app::store::evals::EvalRun;
use massgen::config::RecordsDb;

use crate::support;
use crate::support::{mock_upstream, panel_yaml, write};

const KEY: &str = "sk-mg-ui-test-5d2e8c41";
/// The script stops itself at 55 s; this is the backstop.
const E2E_LIMIT: Duration = Duration::from_secs(60);

pub(crate) fn chromium() -> PathBuf {
    std::env::var_os("MASSGEN_CHROMIUM")
        .map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Why the browser test cannot run here, if it cannot.
pub(crate) fn missing(ui_dir: &Path) -> Option<String> {
    let node = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !node.is_ok_and(|s| s.success()) {
        return Some("node is not installed".into());
    }
    if !chromium().is_file() {
        return Some(format!(
            "{} not found (apt-get install chromium, or set MASSGEN_CHROMIUM)",
            chromium().display()
        ));
    }
    if !ui_dir
        .join("node_modules/playwright-core/package.json")
        .is_file()
    {
        return Some(
            "tests/ui/node_modules/playwright-core missing (cd tests/ui && npm ci)".into(),
        );
    }
    None
}

fn agent(id: &str, label: &str) -> AgentRef {
    AgentRef {
        agent_id: id.into(),
        label: label.into(),
    }
}

/// A session the simulator cannot produce (MCP tool uses, an upstream failure, a proposal
/// of client tool calls, a failed session), built from the engine's own event types and
/// framed as `GET /v1/sessions/{id}/events` frames them. The page is fed it in place of
/// the server's stream for `sess_fixture`.
fn fixture_stream() -> String {
    let (a1, a2) = (agent("researcher", "agent1"), agent("flaky", "agent2"));
    let kinds = vec![
        EventKind::SessionStarted {
            agents: vec![a1.clone(), a2.clone()],
        },
        EventKind::TurnStarted {
            agent: a1.clone(),
            turn: 1,
            answers_seen: vec![],
        },
        EventKind::TurnStarted {
            agent: a2.clone(),
            turn: 1,
            answers_seen: vec![],
        },
        EventKind::AgentDelta {
            agent: a1.clone(),
            text: "Let me look that up.".into(),
        },
        EventKind::ToolCalled {
            agent: a1.clone(),
            tool: "mcp__search__query".into(),
            round: 1,
            duration_ms: 12,
            error: None,
        },
        EventKind::ToolCalled {
            agent: a1.clone(),
            tool: "mcp__files__read".into(),
            round: 1,
            duration_ms: 60_000,
            error: Some("timed out".into()),
        },
        EventKind::AgentFailed {
            error: AgentError {
                agent: a2.clone(),
                kind: AgentErrorKind::Upstream,
                message: "rate limited by groq (429)".into(),
                provider: Some("groq".into()),
                status: Some(429),
                upstream_kind: Some(ProviderErrorKind::RateLimited),
                retry_after_ms: None,
                retry_can_help: None,
            },
        },
        EventKind::Answer {
            answer: Answer {
                agent: a1.clone(),
                answer_label: "agent1.1".into(),
                content: AnswerContent::ToolCalls {
                    calls: vec![ToolCall {
                        id: "call_1".into(),
                        name: "get_weather".into(),
                        arguments: r#"{"city":"Paris"}"#.into(),
                        opaque: None,
                    }],
                },
            },
        },
        EventKind::Usage {
            agent: a1,
            phase: CallPhase::Coordination,
            usage: Usage {
                input_tokens: 100,
                output_tokens: 20,
                total_tokens: 120,
                ..Usage::default()
            },
            cost_usd: Some(0.0004),
        },
        EventKind::SessionFailed {
            error: SessionError {
                kind: SessionErrorKind::Cancelled,
                message: "the client went away".into(),
                agent_errors: vec![],
                cost_usd: Some(0.0004),
                usage: Usage {
                    input_tokens: 100,
                    output_tokens: 20,
                    total_tokens: 120,
                    ..Usage::default()
                },
            },
        },
    ];
    let mut out = String::new();
    for (seq, kind) in kinds.into_iter().enumerate() {
        let event = SessionEvent {
            seq: seq as u64,
            at_ms: 1_700_000_000_000 + 400 * seq as u64,
            session_id: "sess_fixture".into(),
            kind,
        };
        let value = serde_json::to_value(&event).unwrap();
        out.push_str(&format!(
            "event: {}\ndata: {value}\n\n",
            value["type"].as_str().unwrap()
        ));
    }
    out
}

/// Items of the eval run the page's grid shows: more than one page of 25.
const EVAL_ITEMS: usize = 30;

/// Writes `KEY`'s eval run `eval_ui` into a records database at `file`, as `massgen eval
/// --records-db` would: three arms, 30 items, every arm right on the even items except
/// that the agent also gets every item divisible by 5 (the panel wrong, a member right on
/// 5, 15, 25) and self-consistency misses 4 (the arms disagree on 4, 5, 15, 25); item 7
/// fails on every arm.
fn seed_eval_run(file: &Path) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let db = RecordDb::open(&RecordsDb::Sqlite(file.to_path_buf()))
            .await
            .unwrap();
        let arm = |name: &str, kind| ArmInfo {
            name: name.into(),
            kind,
            samples: 1,
            models: vec!["openai/sim-a".into()],
        };
        let arms = vec![
            arm("panel", ArmKind::Panel),
            arm("agent:a", ArmKind::Agent),
            arm("sc3:a", ArmKind::SelfConsistency),
        ];
        let owner = Owner::of_key(KEY);
        let run = EvalRun {
            id: "eval_ui".into(),
            owner: owner.as_str().into(),
            created_ms: 1_700_000_000_000,
            updated_ms: 1_700_000_060_000,
            status: "finished".into(),
            data: "questions.jsonl".into(),
            grader: "exact".into(),
            arms: arms.clone(),
            // Enough of a report for the chart: one priced point per arm.
            report: Some(serde_json::json!({"arms": arms.iter().zip([0.6, 0.5, 0.55]).map(|(a, acc)| {
                serde_json::json!({"name": a.name, "kind": a.kind.as_str(), "samples": 1,
                    "models": a.models, "n": EVAL_ITEMS, "accuracy": acc, "ci95": [acc - 0.1, acc + 0.1],
                    "cost_usd": 0.3 * acc, "cost_per_item_usd": 0.01 * acc})
            }).collect::<Vec<_>>()})),
        };
        db.save_eval_run(&run).await.unwrap();
        for n in 1..=EVAL_ITEMS {
            for a in &arms {
                let right = (n.is_multiple_of(2) && !(a.name == "sc3:a" && n == 4))
                    || (a.name == "agent:a" && n.is_multiple_of(5));
                let item = ItemResult {
                    item: n.to_string(),
                    arm: a.name.clone(),
                    kind: a.kind,
                    correct: right && n != 7,
                    failed: (n == 7).then(|| "every session failed".to_string()),
                    answer: Some(format!("Item {n}, {}: the answer is {n}.", a.name)),
                    extracted: Some(n.to_string()),
                    question: Some(format!("Question {n}: {}", "what is it? ".repeat(12))),
                    reference: Some(serde_json::json!(n.to_string())),
                    members: if a.kind == ArmKind::Panel {
                        vec![Member {
                            agent: "agent1".into(),
                            model: "openai/sim-a".into(),
                            key: Some(n.to_string()),
                            vote: Some("agent1".into()),
                            answer: None,
                        }]
                    } else {
                        Vec::new()
                    },
                    session_ids: vec![format!("sess_{n}_{}", a.name.replace(':', "_"))],
                    latency_s: 1.0,
                    ..ItemResult::default()
                };
                db.save_eval_item("eval_ui", owner.as_str(), &item)
                    .await
                    .unwrap();
            }
        }
        db.close().await;
    });
}

#[test]
fn browser_follows_a_live_session_replays_it_and_shows_model_text_as_text() {
    let ui_dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui");
    if let Some(why) = missing(&ui_dir) {
        assert!(
            std::env::var("MASSGEN_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "MASSGEN_REQUIRE_BROWSER=1 but the browser test cannot run: {why}"
        );
        eprintln!("SKIPPED browser e2e: {why}");
        return;
    }
    let mock = mock_upstream();
    let configs = tempfile::tempdir().unwrap();
    // The sixth agent answers in plain text instead of calling a workflow tool: its text
    // streams into its column (agent_delta), its turns are invalid and it fails.
    let six: Vec<String> = (1..=6)
        .map(|i| match i {
            6 => "sim6:policy=no_tool,words=12".to_string(),
            _ => format!("sim{i}:vote=agent1"),
        })
        .collect();
    let six: Vec<&str> = six.iter().map(String::as_str).collect();
    write(configs.path(), "six.yaml", &panel_yaml(&mock.url, &six, ""));
    let records = configs.path().join("records.db");
    seed_eval_run(&records);
    let records_db = format!("sqlite://{}", records.display());
    let server = support::serve_with_keys(
        &[
            "--demo".as_ref(),
            "--configs-dir".as_ref(),
            configs.path().as_os_str(),
            "--records-db".as_ref(),
            records_db.as_ref(),
        ],
        KEY,
    );
    let url = server.url.clone();

    let fixture = configs.path().join("fixture.sse");
    std::fs::write(&fixture, fixture_stream()).unwrap();

    let mut e2e = Command::new("node")
        .arg(ui_dir.join("e2e.mjs"))
        .arg(&url)
        .env("MASSGEN_UI_KEY", KEY)
        .env("MASSGEN_CHROMIUM", chromium())
        .env("MASSGEN_UI_FIXTURE", &fixture)
        .stdin(Stdio::null())
        .spawn()
        .expect("start node");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = e2e.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > E2E_LIMIT {
            let _ = e2e.kill();
            let _ = e2e.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    drop(server);
    let status = status.expect("the browser e2e ran over 60 s");
    assert!(
        status.success(),
        "browser e2e failed ({status}); see its output above"
    );
}
