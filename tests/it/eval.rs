//! `massgen eval` from outside: the real binary against the simulator, whose agents answer
//! correctly with a seeded probability (`accuracy=P`), so known accuracies go in and the
//! report must measure them.
//!
//! Which session gets which draw depends on timing (many sessions at once), so the checks
//! take a band of 4.4 standard deviations around the truth (a false failure about once in
//! 100,000 runs per arm), not the 95% interval the report prints.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Proc, bin, mock_stats, mock_upstream, offline, panel_yaml, run_bounded, write,
};

const LIMIT: Duration = Duration::from_secs(300);

/// Three agents at 0.7 with equal timing, so their first answers are drawn independently
/// (nobody's first turn sees another answer) and the panel's answer is their majority.
fn trio(mock: &Proc, priced: bool) -> String {
    let models = [
        "a:accuracy=0.7,seed=11,ttft_ms=20,token_ms=2,words=40",
        "b:accuracy=0.7,seed=22,ttft_ms=20,token_ms=2,words=40",
        "c:accuracy=0.7,seed=33,ttft_ms=20,token_ms=2,words=40",
    ];
    let yaml = panel_yaml(&mock.url, &models, "");
    if priced {
        yaml.replace(
            "\n      model: ",
            "\n      pricing: {input_per_million: 2, output_per_million: 8}\n      model: ",
        )
    } else {
        yaml
    }
}

/// `n` questions whose truth the simulator reads from the marker.
fn questions(n: usize) -> String {
    (1..=n)
        .map(|i| {
            format!(
                "{{\"id\": \"q{i}\", \"question\": \"What is {i} times 3? [sim:truth={}]\", \"answer\": \"{}\"}}\n",
                i * 3,
                i * 3
            )
        })
        .collect()
}

fn eval(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(bin());
    offline(&mut cmd);
    cmd.arg("eval")
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "error")
        .env_remove("MASSGEN_SERVER_RECORDS_DB")
        .env_remove("MASSGEN_SERVER_DEFAULT_CONFIG")
        .env_remove("MASSGEN_SERVER_CONFIGS_DIR");
    run_bounded(cmd, LIMIT)
}

fn ok(output: &Output) {
    assert!(
        output.status.success(),
        "eval failed: {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn report(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    serde_json::from_str(&text).expect("report.json is JSON")
}

fn arm<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no arm {name} in {report}"))
}

fn items(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("items.jsonl"))
        .expect("items.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an items.jsonl line is JSON"))
        .collect()
}

fn wilson(correct: f64, n: f64) -> (f64, f64) {
    let z = 1.959_963_984_540_054_f64;
    let p = correct / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
    (centre - half, centre + half)
}

/// The measured accuracy of `arm` is within 4.4 standard deviations of `truth`, and its
/// printed interval is Wilson's.
fn measured(report: &Value, name: &str, truth: f64) {
    let a = arm(report, name);
    let n = a["n"].as_f64().unwrap();
    let correct = a["correct"].as_f64().unwrap();
    let accuracy = a["accuracy"].as_f64().unwrap();
    assert!((accuracy - correct / n).abs() < 1e-9, "{a}");
    let band = 4.4 * (truth * (1.0 - truth) / n).sqrt();
    assert!(
        (accuracy - truth).abs() <= band,
        "{name}: measured {accuracy} ({correct}/{n}), truth {truth} ± {band}"
    );
    let (lo, hi) = wilson(correct, n);
    let ci = a["ci95"].as_array().unwrap();
    assert!((ci[0].as_f64().unwrap() - lo).abs() < 1e-6, "{a}");
    assert!((ci[1].as_f64().unwrap() - hi).abs() < 1e-6, "{a}");
    assert_eq!(a["failures"], 0, "{a}");
}

fn setup(items: usize, priced: bool) -> (Proc, tempfile::TempDir, PathBuf, PathBuf) {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &trio(&mock, priced));
    let data = write(dir.path(), "questions.jsonl", &questions(items));
    (mock, dir, config, data)
}

async fn requests(mock: &Proc) -> u64 {
    mock_stats(mock).await["requests"].as_u64().unwrap()
}

#[test]
fn known_accuracies_come_out_of_every_arm() {
    let (_mock, dir, config, data) = setup(200, false);
    let out = dir.path().join("run");
    let output = eval(
        dir.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--samples",
            "3",
            "--concurrency",
            "12",
        ],
    );
    ok(&output);
    let report = report(&out);
    let names: Vec<&str> = report["arms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "team",
            "agent:sim1",
            "sc3:sim1",
            "agent:sim2",
            "sc3:sim2",
            "agent:sim3",
            "sc3:sim3"
        ]
    );
    // Three independent agents at 0.7: a majority is right 0.784 of the time, both for the
    // panel (each votes for the answer most agents gave) and for three samples of one.
    let majority = 0.7f64.powi(3) + 3.0 * 0.7f64.powi(2) * 0.3;
    measured(&report, "team", majority);
    for agent in ["sim1", "sim2", "sim3"] {
        measured(&report, &format!("agent:{agent}"), 0.7);
        measured(&report, &format!("sc3:{agent}"), majority);
    }
    let team = arm(&report, "team");
    assert_eq!(team["kind"], "panel");
    assert!(team["vs_panel"].is_null());
    let alone = arm(&report, "agent:sim1");
    assert_eq!(alone["kind"], "agent");
    let paired = &alone["vs_panel"];
    assert_eq!(paired["against"], "team");
    let (w, t, l) = (
        paired["wins"].as_u64().unwrap(),
        paired["ties"].as_u64().unwrap(),
        paired["losses"].as_u64().unwrap(),
    );
    assert_eq!(w + t + l, 200);
    assert!(paired["p_value"].as_f64().unwrap() <= 1.0);
    assert_eq!(arm(&report, "sc3:sim2")["kind"], "self_consistency");
    // The simulator has no price: cost is unknown, never 0.
    assert!(team["cost_usd"].is_null(), "{team}");
    // One line per item and arm, each with the sessions behind it.
    let lines = items(&out);
    assert_eq!(lines.len(), 200 * 7);
    for line in &lines {
        let sessions = line["session_ids"].as_array().unwrap();
        let wanted = if line["kind"] == "self_consistency" {
            3
        } else {
            1
        };
        assert_eq!(sessions.len(), wanted, "{line}");
    }
    let sc = lines
        .iter()
        .find(|l| l["arm"] == "sc3:sim1" && l["item"] == "q5")
        .unwrap();
    assert_eq!(sc["samples"].as_array().unwrap().len(), 3);
    // The other files.
    let markdown = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(markdown.contains("sc3:sim1"), "{markdown}");
    let svg = std::fs::read_to_string(out.join("chart.svg")).unwrap();
    assert!(svg.trim_start().starts_with("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<circle").count(), 7, "{svg}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("agent:sim3"), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("eval: done: 200/200 items"), "{stderr}");
}

#[tokio::test]
async fn a_rerun_skips_what_was_graded_and_redoes_what_was_not() {
    let (mock, dir, config, data) = setup(6, false);
    let out = dir.path().join("run");
    let args = [
        "--data",
        data.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--baselines",
        "agents",
    ];
    ok(&eval(dir.path(), &args));
    let first = report(&out);
    // 6 items: a panel session (7 calls) and 3 agents alone (1 call each).
    assert_eq!(requests(&mock).await, 6 * 10);
    ok(&eval(dir.path(), &args));
    assert_eq!(
        requests(&mock).await,
        6 * 10,
        "a finished run makes no call"
    );
    assert_eq!(report(&out)["arms"], first["arms"]);
    assert_eq!(report(&out)["run"]["run_id"], first["run"]["run_id"]);
    // Lose the last item's lines (and leave a torn line, as a crash would).
    let path = out.join("items.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.contains("\"item\":\"q6\""))
        .collect();
    assert_eq!(kept.len(), 5 * 4);
    std::fs::write(
        &path,
        format!("{}\n{{\"item\":\"q6\",\"ar", kept.join("\n")),
    )
    .unwrap();
    let output = eval(dir.path(), &args);
    ok(&output);
    assert_eq!(requests(&mock).await, 6 * 10 + 10, "only q6 runs again");
    assert_eq!(items(&out).len(), 6 * 4);
    assert!(String::from_utf8_lossy(&output.stderr).contains("resuming: 5 of 6 items"));
    // Another grader over the same folder is refused.
    let mut other: Vec<&str> = args.to_vec();
    other.extend(["--grader", "numeric"]);
    let refused = eval(dir.path(), &other);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("graded by exact"));
}

#[tokio::test]
async fn the_budget_stops_new_items_and_keeps_started_ones_whole() {
    let (mock, dir, config, data) = setup(40, true);
    let out = dir.path().join("run");
    let output = eval(
        dir.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--baselines",
            "agents",
            "--concurrency",
            "2",
            "--max-cost-usd",
            "0.02",
        ],
    );
    ok(&output);
    let report = report(&out);
    assert_eq!(report["run"]["stopped_by_budget"], true, "{report}");
    let lines = items(&out);
    let graded: std::collections::BTreeSet<&str> =
        lines.iter().map(|l| l["item"].as_str().unwrap()).collect();
    assert!(
        graded.len() < 40,
        "the budget stopped nothing: {}",
        graded.len()
    );
    assert!(!graded.is_empty());
    // Every item that began has every arm: the paired comparison stays paired.
    assert_eq!(lines.len(), graded.len() * 4);
    let spent = report["total_cost_usd"].as_f64().unwrap();
    assert!(spent >= 0.02, "{spent}");
    // At most the items in flight when it was reached go past it.
    let per_item = spent / graded.len() as f64;
    assert!(
        spent < 0.02 + 3.0 * per_item,
        "{spent} ({per_item} an item)"
    );
    assert!(requests(&mock).await < 40 * 10);
    // Unpriced models cannot keep a budget: refused before any call.
    let (mock, dir, config, data) = setup(3, false);
    let refused = eval(
        dir.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            dir.path().join("r").to_str().unwrap(),
            "--max-cost-usd",
            "1",
        ],
    );
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("has no price"));
    assert_eq!(requests(&mock).await, 0);
}

#[tokio::test]
async fn a_simulated_judge_grades_like_the_truth() {
    let (mock, dir, config, data) = setup(30, false);
    let judge = write(
        dir.path(),
        "judge.yaml",
        &panel_yaml(&mock.url, &["judge:policy=judge,ttft_ms=1,token_ms=0"], ""),
    );
    let out = dir.path().join("run");
    let output = eval(
        dir.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--baselines",
            "agents",
            "--grader",
            "judge",
            "--judge",
            judge.to_str().unwrap(),
        ],
    );
    ok(&output);
    let lines = items(&out);
    assert_eq!(lines.len(), 30 * 4);
    for line in &lines {
        // The judge is right every time: its verdict is the truth of the extracted answer.
        let item = line["item"].as_str().unwrap();
        let i: u64 = item.trim_start_matches('q').parse().unwrap();
        let truth = (i * 3).to_string();
        assert_eq!(
            line["correct"],
            line["extracted"] == truth.as_str(),
            "{line}"
        );
        assert_eq!(
            line["judge_session_ids"].as_array().unwrap().len(),
            1,
            "{line}"
        );
    }
    // 30 items × (7 + 3) calls for the arms, one judge call per item and arm.
    assert_eq!(requests(&mock).await, 30 * 10 + 30 * 4);
    let report = report(&out);
    assert_eq!(report["run"]["grader"], "judge");
}

#[tokio::test]
async fn bad_data_and_flags_are_refused_before_any_call() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &trio(&mock, false));
    let out = dir.path().join("run");
    let cases: Vec<(String, Vec<&str>, &str)> = vec![
        (
            "{\"question\": \"Q1\", \"answer\": \"1\"}\n{\"question\": \"Q2\"}\n".into(),
            vec![],
            "line 2: no \"answer\", which the exact grader compares with",
        ),
        (
            "{\"question\": \"Q\", \"answer\": \"ten\"}\n".into(),
            vec!["--grader", "numeric"],
            "line 1: \"answer\" must be a number",
        ),
        (
            "{\"question\": \"Q\", \"answer\": \"1\"}\n".into(),
            vec!["--grader", "judge"],
            "--grader judge needs --judge",
        ),
        (
            "{\"question\": \"Q\", \"answer\": \"1\"}\n".into(),
            vec!["--baselines", "agents,oracle"],
            "unknown baseline 'oracle'",
        ),
        (
            "{\"question\": \"Q\", \"answer\": \"1\"}\n".into(),
            vec!["--panel", "nope"],
            "no panel 'nope'",
        ),
        (
            "{\"question\": \"Q\", \"answer\": \"1\"}\n".into(),
            vec!["--grader", "json-schema"],
            "needs --schema",
        ),
    ];
    for (data, extra, wanted) in cases {
        let data = write(dir.path(), "data.jsonl", &data);
        let mut args = vec![
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ];
        args.extend(extra);
        let output = eval(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(wanted), "{args:?}: {stderr}");
    }
    assert_eq!(requests(&mock).await, 0);
}

#[test]
fn structured_answers_are_graded_against_the_schema() {
    let (_mock, dir, config, _) = setup(1, false);
    let schema = write(
        dir.path(),
        "schema.json",
        r#"{"type": "object", "properties": {"city": {"type": "string"}, "population": {"type": "integer"}}, "required": ["city", "population"]}"#,
    );
    let data = write(
        dir.path(),
        "cities.jsonl",
        "{\"question\": \"The largest city of France, as JSON\"}\n{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": \"Hello\"}, {\"role\": \"user\", \"content\": \"And of Spain?\"}]}\n",
    );
    let out = dir.path().join("run");
    let output = eval(
        dir.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--grader",
            "json-schema",
            "--schema",
            schema.to_str().unwrap(),
            "--baselines",
            "none",
        ],
    );
    ok(&output);
    let lines = items(&out);
    assert_eq!(lines.len(), 2);
    for line in &lines {
        assert_eq!(line["correct"], true, "{line}");
        let answer: Value = serde_json::from_str(line["answer"].as_str().unwrap()).unwrap();
        assert!(answer["population"].is_i64(), "{answer}");
    }
}
