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
    Proc, bin, get, mock_stats, mock_upstream, offline, panel_yaml, run_bounded, write,
};

const LIMIT: Duration = Duration::from_secs(300);

/// Three agents at 0.7 with equal timing, so their first answers are drawn independently
/// (nobody's first turn sees another answer) and the panel's answer is their majority.
pub(crate) fn trio(mock: &Proc, priced: bool) -> String {
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
pub(crate) fn questions(n: usize) -> String {
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

pub(crate) fn eval(dir: &Path, args: &[&str]) -> Output {
    eval_with(dir, args, &[])
}

pub(crate) fn eval_with(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(bin());
    offline(&mut cmd);
    cmd.arg("eval")
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "error")
        .env_remove("MASSGEN_SERVER_RECORDS_DB")
        .env_remove("MASSGEN_SERVER_DEFAULT_CONFIG")
        .env_remove("MASSGEN_SERVER_CONFIGS_DIR")
        .env_remove("MASSGEN_EVAL_KEY")
        .envs(env.iter().copied());
    run_bounded(cmd, LIMIT)
}

pub(crate) fn ok(output: &Output) {
    assert!(
        output.status.success(),
        "eval failed: {:?}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

pub(crate) fn report(out: &Path) -> Value {
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

pub(crate) fn items(out: &Path) -> Vec<Value> {
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

pub(crate) fn setup(items: usize, priced: bool) -> (Proc, tempfile::TempDir, PathBuf, PathBuf) {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &trio(&mock, priced));
    let data = write(dir.path(), "questions.jsonl", &questions(items));
    (mock, dir, config, data)
}

pub(crate) async fn requests(mock: &Proc) -> u64 {
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
    // Self-consistency answers with the value most samples gave (ties: the earliest).
    for sc in lines.iter().filter(|l| l["kind"] == "self_consistency") {
        let samples: Vec<&str> = sc["samples"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(samples.len(), 3, "{sc}");
        let count = |v: &str| samples.iter().filter(|s| **s == v).count();
        let best = samples.iter().map(|v| count(v)).max().unwrap();
        let chosen = samples.iter().find(|v| count(v) == best).unwrap();
        assert_eq!(sc["extracted"], *chosen, "{sc}");
        let i: u64 = sc["item"].as_str().unwrap()[1..].parse().unwrap();
        assert_eq!(sc["correct"], *chosen == (i * 3).to_string(), "{sc}");
    }
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

/// The session ids of each (item, arm) line.
fn sessions_by_line(out: &Path) -> std::collections::BTreeMap<(String, String), Value> {
    items(out)
        .into_iter()
        .map(|l| {
            let key = (
                l["item"].as_str().unwrap().to_string(),
                l["arm"].as_str().unwrap().to_string(),
            );
            (key, l["session_ids"].clone())
        })
        .collect()
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
    // 6 items: a panel session (7 calls, more if a turn restarts) and 3 agents alone.
    let calls = requests(&mock).await;
    assert!(calls >= 6 * 10, "{calls}");
    let before = sessions_by_line(&out);
    ok(&eval(dir.path(), &args));
    assert_eq!(requests(&mock).await, calls, "a finished run makes no call");
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
    assert!(String::from_utf8_lossy(&output.stderr).contains("resuming: 5 of 6 items"));
    let now = sessions_by_line(&out);
    assert_eq!(now.len(), 6 * 4);
    for (key, sessions) in &now {
        // q6 ran again (new sessions); nothing else did.
        assert_eq!(key.0 != "q6", before[key] == *sessions, "{key:?}");
    }
    let calls_q6 = requests(&mock).await - calls;
    assert!(
        (10..20).contains(&calls_q6),
        "only q6 runs again: {calls_q6} calls"
    );
    // A question that changed is asked again under its id; the others stay.
    let changed = std::fs::read_to_string(&data)
        .unwrap()
        .replace("What is 2 times 3?", "What is two times 3?");
    std::fs::write(&data, changed).unwrap();
    let before = now;
    ok(&eval(dir.path(), &args));
    let now = sessions_by_line(&out);
    for (key, sessions) in &now {
        assert_eq!(key.0 != "q2", before[key] == *sessions, "{key:?}");
    }
    // The report counts each (item, arm) once: the newest line.
    assert_eq!(arm(&report(&out), "team")["n"], 6);
    // Adding a baseline runs only it: the agents alone stay as they were.
    let mut more: Vec<&str> = args[..6].to_vec();
    more.extend(["--baselines", "agents,self-consistency", "--samples", "3"]);
    let before = now;
    let calls = requests(&mock).await;
    ok(&eval(dir.path(), &more));
    let now = sessions_by_line(&out);
    assert_eq!(now.len(), 6 * 7);
    for (key, sessions) in &before {
        assert_eq!(now[key], *sessions, "{key:?} ran again");
    }
    assert_eq!(
        requests(&mock).await - calls,
        6 * 3 * 3,
        "3 samples of 3 agents"
    );
    assert_eq!(arm(&report(&out), "sc3:sim1")["n"], 6);
}

#[tokio::test]
async fn the_budget_stops_new_items_and_keeps_started_ones_whole() {
    let (mock, dir, config, data) = setup(40, true);
    let out = dir.path().join("run");
    let budget_args = [
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
    ];
    let output = eval(dir.path(), &budget_args);
    // 3: stopped by --max-cost-usd, the report written with the reason.
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    let first = report(&out);
    assert_eq!(first["run"]["stopped_by_budget"], true, "{first}");
    assert_eq!(first["run"]["stopped"]["reason"], "budget", "{first}");
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
    let spent = first["total_cost_usd"].as_f64().unwrap();
    assert!(spent >= 0.02, "{spent}");
    // At most the items in flight when it was reached go past it.
    let per_item = spent / graded.len() as f64;
    assert!(
        spent < 0.02 + 3.0 * per_item,
        "{spent} ({per_item} an item)"
    );
    let calls = requests(&mock).await;
    assert!(calls < 40 * 10);
    // The budget is the run's: a rerun of it, having spent it already, starts nothing.
    let again = eval(dir.path(), &budget_args);
    assert_eq!(again.status.code(), Some(3), "{again:?}");
    assert_eq!(requests(&mock).await, calls, "a spent run makes no call");
    assert_eq!(report(&out)["run"]["stopped_by_budget"], true);
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
        &panel_yaml(
            &mock.url,
            &["judge:policy=judge,accuracy=0,ttft_ms=1,token_ms=0"],
            "",
        ),
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
        // This judge is wrong every time (accuracy=0): its verdict is the opposite of the
        // truth of the extracted answer, so the grade is the judge's, not an exact match.
        let item = line["item"].as_str().unwrap();
        let i: u64 = item.trim_start_matches('q').parse().unwrap();
        let truth = (i * 3).to_string();
        assert_eq!(
            line["correct"],
            line["extracted"] != truth.as_str(),
            "{line}"
        );
        assert_eq!(
            line["judge_session_ids"].as_array().unwrap().len(),
            1,
            "{line}"
        );
    }
    // One judge call per item and arm.
    let stats = mock_stats(&mock).await;
    assert_eq!(stats["by_model"]["judge"]["requests"], 30 * 4, "{stats}");
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
            "line 2: no \"answer\" (or \"target\", \"ideal\", \"expected\"), which the exact grader compares with",
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
        (
            "{\"question\": \"Q\", \"answer\": \"1\"}\n".into(),
            vec!["--concurrency", "5000"],
            "--concurrency must be from 1 to 1024",
        ),
        (
            "{\"question\": \"Q\", \"answer\": \"1\"}\n".into(),
            vec!["--baselines", "agents", "--samples", "3"],
            "--samples is read by the self-consistency baseline only",
        ),
        (
            "{\"question\": \"Q\", \"answer\": \"1\"}\n".into(),
            vec!["--tolerance", "0.000001"],
            "--tolerance and --relative-tolerance are read by --grader numeric only",
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

#[tokio::test]
async fn runs_in_the_records_are_served_to_their_key() {
    let (_mock, dir, config, data) = setup(3, false);
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    let out = dir.path().join("run");
    let output = eval_with(
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
            "--records-db",
            &db,
        ],
        &[("MASSGEN_EVAL_KEY", "k-eval")],
    );
    ok(&output);
    let run_id = report(&out)["run"]["run_id"].as_str().unwrap().to_string();
    let server = crate::support::serve_with_keys(
        &[
            std::ffi::OsStr::new("--records-db"),
            std::ffi::OsStr::new(&db),
            std::ffi::OsStr::new("--config"),
            config.as_os_str(),
        ],
        "k-eval,k-other",
    );
    let listed: Value = get(&format!("{}/v1/evals", server.url), Some("k-eval"))
        .await
        .json()
        .await
        .unwrap();
    let runs = listed["data"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{listed}");
    assert_eq!(runs[0]["id"], run_id.as_str());
    assert_eq!(runs[0]["status"], "finished");
    assert_eq!(runs[0]["summary"].as_array().unwrap().len(), 4, "{listed}");
    // Another key sees none of it.
    let other: Value = get(&format!("{}/v1/evals", server.url), Some("k-other"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(other["data"].as_array().unwrap().len(), 0, "{other}");
    // Every item's sessions are records of that key.
    let run: Value = get(&format!("{}/v1/evals/{run_id}", server.url), Some("k-eval"))
        .await
        .json()
        .await
        .unwrap();
    let items = run["items"].as_array().unwrap();
    assert_eq!(items.len(), 3 * 4, "{run}");
    for item in items {
        for id in item["session_ids"].as_array().unwrap() {
            let url = format!("{}/v1/sessions/{}", server.url, id.as_str().unwrap());
            let response = get(&url, Some("k-eval")).await;
            assert_eq!(response.status(), 200, "{url}");
            let record: Value = response.json().await.unwrap();
            assert_eq!(record["status"], "completed", "{record}");
        }
    }
}

#[test]
fn ctrl_c_stops_new_items_and_a_rerun_finishes_them() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let models = [
        "a:accuracy=0.7,seed=1,ttft_ms=150,token_ms=1,words=5",
        "b:accuracy=0.7,seed=2,ttft_ms=150,token_ms=1,words=5",
    ];
    let config = write(dir.path(), "pair.yaml", &panel_yaml(&mock.url, &models, ""));
    let data = write(dir.path(), "questions.jsonl", &questions(30));
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
        "--concurrency",
        "1",
    ];
    let mut cmd = Command::new(bin());
    offline(&mut cmd);
    let log = dir.path().join("stderr.log");
    let mut child = cmd
        .arg("eval")
        .args(args)
        .env("RUST_LOG", "error")
        .env_remove("MASSGEN_SERVER_RECORDS_DB")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Once a few items are graded, Ctrl-C.
    let lines = |out: &Path| {
        std::fs::read_to_string(out.join("items.jsonl"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while lines(&out) < 6 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("eval still running 60 s after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = std::fs::read_to_string(&log).unwrap();
    // 130, as a shell reports an interrupted command, with the report written first.
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("eval: interrupted"), "{stderr}");
    let report_now = report(&out);
    assert_eq!(report_now["run"]["interrupted"], true, "{report_now}");
    let graded = items(&out).len();
    assert!(graded < 30 * 3, "{graded}");
    // Every item that started ran on every arm (a panel and two agents alone).
    assert_eq!(graded % 3, 0, "{graded}");
    // A rerun does the rest.
    let output = eval(dir.path(), &args);
    ok(&output);
    assert_eq!(items(&out).len(), 30 * 3);
    let finished = report(&out);
    assert_eq!(finished["run"]["interrupted"], false);
    assert_eq!(arm(&finished, "pair")["n"], 30);
}
