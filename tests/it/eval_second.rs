//! `massgen eval`'s second step from outside (issue 38), on the real binary and the
//! simulator: failures stop a run with exit 4 and the reason, another grader re-grades the
//! stored answers with no upstream call, the verdict's numbers are the items' own, and
//! `--demo` runs with no key and no config.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::eval::{eval, items, ok, questions, report, requests, setup, trio};
use crate::support::recording::RecordingSimulator;
use crate::support::{mock_upstream, panel_yaml, write};

/// A panel whose every call goes to a port nothing listens on.
fn dead_panel() -> String {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    panel_yaml(&url, &["a", "b", "c"], "")
}

#[test]
fn a_dead_upstream_stops_the_run_with_exit_4_and_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &dead_panel());
    let data = write(dir.path(), "q.jsonl", &questions(60));
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
            "none",
            "--concurrency",
            "2",
        ],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    let stop_lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("eval: stopped"))
        .collect();
    assert_eq!(stop_lines.len(), 1, "one line says why: {stderr}");
    let r = report(&out);
    let stopped = &r["run"]["stopped"];
    assert_eq!(stopped["reason"], "failures", "{r}");
    assert!(
        stopped["most_common_error"]
            .as_str()
            .is_some_and(|e| !e.is_empty()),
        "{r}"
    );
    // The first ten all failed: no new item started after them (those running finish).
    let lines = items(&out);
    assert!(
        (10..=12).contains(&lines.len()),
        "{} of 60 items tried",
        lines.len()
    );
    assert!(lines.iter().all(|l| l["failed"].is_string()));
    let panel = &r["arms"][0];
    assert_eq!(panel["failures"].as_u64(), Some(lines.len() as u64), "{r}");
}

#[tokio::test]
async fn another_grader_regrades_the_stored_answers_without_a_call() {
    let (mock, dir, config, data) = setup(12, false);
    let out = dir.path().join("run");
    let run = |grader: &str| {
        eval(
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
                grader,
            ],
        )
    };
    ok(&run("exact"));
    let asked = requests(&mock).await;
    assert!(asked > 0);
    let graded = |out: &std::path::Path| -> BTreeMap<(String, String), (bool, Value)> {
        items(out)
            .into_iter()
            .map(|l| {
                let key = (
                    l["item"].as_str().unwrap().to_string(),
                    l["arm"].as_str().unwrap().to_string(),
                );
                (key, (l["correct"].as_bool().unwrap(), l["answer"].clone()))
            })
            .collect()
    };
    let exact = graded(&out);

    // The same run with another grader: every answer is kept, none is asked again.
    ok(&run("numeric"));
    assert_eq!(requests(&mock).await, asked, "a grader change asks nothing");
    assert_eq!(report(&out)["run"]["grader"], "numeric");
    let numeric = graded(&out);
    assert_eq!(exact.len(), numeric.len());
    for (key, (correct, answer)) in &numeric {
        let (was, before) = &exact[key];
        assert_eq!(answer, before, "{key:?}: the same answer");
        // The simulator's answers end on the number: a right one reads as right either way.
        assert_eq!(correct, was, "{key:?}: {answer}");
    }

    // `--regrade` with only the grader's flags: the run is read from --out.
    let again = eval(
        dir.path(),
        &[
            "--out",
            out.to_str().unwrap(),
            "--regrade",
            "--grader",
            "exact",
        ],
    );
    ok(&again);
    assert_eq!(requests(&mock).await, asked);
    assert_eq!(report(&out)["run"]["grader"], "exact");
    assert_eq!(graded(&out), exact);

    // Without a run in --out, --regrade says so (a usage error).
    let empty = dir.path().join("nothing");
    let refused = eval(dir.path(), &["--out", empty.to_str().unwrap(), "--regrade"]);
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--regrade"));
}

/// The panel against its best member, recomputed from items.jsonl: the best member's
/// accuracy, the paired difference in points and the discordant counts.
#[test]
fn the_verdict_is_one_sentence_whose_numbers_are_the_items() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let config = write(dir.path(), "team.yaml", &trio(&mock, true));
    let data = write(dir.path(), "q.jsonl", &questions(30));
    let out = dir.path().join("run");
    ok(&eval(
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
        ],
    ));
    let r = report(&out);
    let verdict = &r["verdict"];
    let panel = verdict["panel"].as_str().unwrap().to_string();
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    let sentence = verdict["sentence"].as_str().unwrap();
    assert!(sentence.starts_with("The panel"), "{sentence}");
    assert!(md.contains(sentence), "report.md opens with it: {md}");

    let mut by_arm: BTreeMap<String, BTreeMap<String, bool>> = BTreeMap::new();
    for l in items(&out) {
        by_arm
            .entry(l["arm"].as_str().unwrap().to_string())
            .or_default()
            .insert(
                l["item"].as_str().unwrap().to_string(),
                l["correct"].as_bool().unwrap(),
            );
    }
    let accuracy = |arm: &str| {
        let a = &by_arm[arm];
        a.values().filter(|c| **c).count() as f64 / a.len() as f64
    };
    // The best member: the agent arm with the best accuracy, the first of equals.
    let mut best: Option<(String, f64)> = None;
    for arm in by_arm.keys().filter(|a| a.starts_with("agent:")) {
        let acc = accuracy(arm);
        if best.as_ref().is_none_or(|(_, b)| acc > *b) {
            best = Some((arm.clone(), acc));
        }
    }
    let (best, best_accuracy) = best.unwrap();
    let v = &verdict["vs_best_member"];
    assert_eq!(v["arm"], best.as_str(), "{verdict}");
    assert!((v["arm_accuracy"].as_f64().unwrap() - best_accuracy).abs() < 1e-9);
    let (mut pr_aw, mut both_r, mut both_w, mut pw_ar) = (0, 0, 0, 0);
    for (item, panel_right) in &by_arm[&panel] {
        match (*panel_right, by_arm[&best][item]) {
            (true, false) => pr_aw += 1,
            (true, true) => both_r += 1,
            (false, false) => both_w += 1,
            (false, true) => pw_ar += 1,
        }
    }
    assert_eq!(v["panel_right_arm_wrong"], pr_aw, "{v}");
    assert_eq!(v["both_right"], both_r, "{v}");
    assert_eq!(v["both_wrong"], both_w, "{v}");
    assert_eq!(v["panel_wrong_arm_right"], pw_ar, "{v}");
    let pairs = (pr_aw + both_r + both_w + pw_ar) as f64;
    let difference = 100.0 * (pr_aw as f64 - pw_ar as f64) / pairs;
    assert!(
        (v["difference_points"].as_f64().unwrap() - difference).abs() < 1e-9,
        "{v}"
    );
    // The interval: Newcombe's paired score interval (method 10), computed here apart.
    let (lo, hi) = newcombe(both_r, pr_aw, pw_ar, both_w);
    let ci = v["ci95_points"].as_array().unwrap();
    assert!((ci[0].as_f64().unwrap() - 100.0 * lo).abs() < 1e-6, "{v}");
    assert!((ci[1].as_f64().unwrap() - 100.0 * hi).abs() < 1e-6, "{v}");
    assert!(lo <= difference / 100.0 && difference / 100.0 <= hi);
    // The exact McNemar p: a two-sided binomial test of the discordant pairs at 1/2.
    let p = mcnemar(pr_aw, pw_ar);
    assert!(
        (v["p_value"].as_f64().unwrap() - p).abs() < 1e-9,
        "{v}: {p}"
    );
    // Both arms are priced: the ratio is the cost per item's.
    let ratio = v["panel_cost_per_item_usd"].as_f64().unwrap()
        / v["arm_cost_per_item_usd"].as_f64().unwrap();
    assert!(
        (v["cost_ratio"].as_f64().unwrap() - ratio).abs() < 1e-9,
        "{v}"
    );
    assert!(
        ratio > 1.0,
        "a panel costs more than one of its agents: {v}"
    );
}

#[test]
fn the_demo_runs_with_no_key_and_no_config() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let output = eval(
        dir.path(),
        &["--demo", "--out", out.to_str().unwrap(), "--limit", "6"],
    );
    ok(&output);
    let r = report(&out);
    assert_eq!(r["run"]["questions"], 6, "{r}");
    assert!(r["verdict"]["sentence"].is_string(), "{r}");
    let lines = items(&out);
    assert!(!lines.is_empty());
    assert!(lines.iter().all(|l| l["failed"].is_null()), "{lines:?}");
    assert!(lines.iter().all(|l| l["question"].is_string()));
}

fn wilson(correct: u64, n: u64) -> (f64, f64) {
    let z = 1.959_963_984_540_054_f64;
    let n = n as f64;
    let p = correct as f64 / n;
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
    (centre - half, centre + half)
}

/// Newcombe (1998), method 10, for a 2x2 table of paired outcomes: `a` both right, `b`
/// only the first, `c` only the second, `d` both wrong.
fn newcombe(a: u64, b: u64, c: u64, d: u64) -> (f64, f64) {
    let n = a + b + c + d;
    let (af, bf, cf, df, nf) = (a as f64, b as f64, c as f64, d as f64, n as f64);
    let (p1, p2) = ((af + bf) / nf, (af + cf) / nf);
    let (l1, u1) = wilson(a + b, n);
    let (l2, u2) = wilson(a + c, n);
    let margins = (af + bf) * (cf + df) * (af + cf) * (bf + df);
    let phi = if margins > 0.0 {
        (af * df - bf * cf) / margins.sqrt()
    } else {
        0.0
    };
    let d1 = p1 - l1;
    let e1 = u2 - p2;
    let d2 = u1 - p1;
    let e2 = p2 - l2;
    let low = p1 - p2 - (d1 * d1 - 2.0 * phi * d1 * e1 + e1 * e1).max(0.0).sqrt();
    let high = p1 - p2 + (d2 * d2 - 2.0 * phi * d2 * e2 + e2 * e2).max(0.0).sqrt();
    (low.max(-1.0), high.min(1.0))
}

/// `min(1, 2 P(X <= min(b, c)))` for X ~ Binomial(b + c, 1/2), summed directly.
fn mcnemar(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let k = b.min(c);
    let mut term = 0.5f64.powi(n as i32); // C(n, 0) / 2^n
    let mut sum = term;
    for i in 1..=k {
        term *= (n - i + 1) as f64 / i as f64;
        sum += term;
    }
    (2.0 * sum).min(1.0)
}

/// The agent-alone arm is the call a user would make: the item's question and the run's
/// instruction, no coordination prompt, no workflow tool; the panel's calls still have them.
#[test]
fn the_agent_alone_arm_sends_the_items_messages_as_they_are() {
    let sim = RecordingSimulator::start();
    let dir = tempfile::tempdir().unwrap();
    let models = [
        "a:ttft_ms=5,token_ms=1,words=10",
        "b:ttft_ms=5,token_ms=1,words=10",
    ];
    let config = write(dir.path(), "team.yaml", &panel_yaml(&sim.url, &models, ""));
    let question = "What is 7 times 3? [sim:truth=21]";
    let data = write(
        dir.path(),
        "q.jsonl",
        &format!("{{\"question\": \"{question}\", \"answer\": \"21\"}}\n"),
    );
    let out = dir.path().join("run");
    ok(&eval(
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
            "--instruction",
            "Reply briefly.",
        ],
    ));
    let requests = sim.requests();
    let offers_workflow = |r: &Value| {
        r["tools"].as_array().is_some_and(|tools| {
            tools
                .iter()
                .any(|t| t["function"]["name"] == "new_answer" || t["function"]["name"] == "vote")
        })
    };
    let alone: Vec<&Value> = requests.iter().filter(|r| !offers_workflow(r)).collect();
    let panel = requests.iter().filter(|r| offers_workflow(r)).count();
    assert!(panel > 0, "the panel coordinates");
    // One call per agent alone (and the panel's presentation, which offers no tool).
    let for_agent = |id: &str| -> Vec<&&Value> {
        alone
            .iter()
            .filter(|r| {
                r["model"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(&format!("{id}:")))
            })
            .filter(|r| r["messages"].as_array().is_some_and(|m| m.len() == 2))
            .collect()
    };
    for id in ["a", "b"] {
        let calls = for_agent(id);
        assert!(!calls.is_empty(), "no plain call of {id}: {requests:?}");
        let call = calls
            .iter()
            .find(|r| r["messages"][1]["content"] == question)
            .unwrap_or_else(|| panic!("{id}: {calls:?}"));
        assert_eq!(
            call["messages"],
            serde_json::json!([
                {"role": "system", "content": "Reply briefly."},
                {"role": "user", "content": question},
            ]),
            "{call}"
        );
        assert!(call.get("tools").is_none(), "{call}");
    }
}

/// Other tools' key names and extra keys: the metadata comes back in items.jsonl and
/// `--group-by` splits the report by it.
#[tokio::test]
async fn other_tools_data_and_its_metadata_round_trip() {
    // The simulator lives as long as the test.
    let (_mock, dir, config, _) = setup(1, false);
    let lines: String = (1..=6u64)
        .map(|i| {
            let topic = if i.is_multiple_of(2) { "even" } else { "odd" };
            format!(
                "{{\"input\": \"What is {i} times 3? [sim:truth={t}]\", \"target\": {t}, \"topic\": \"{topic}\", \"metadata\": {{\"source\": \"s{i}\"}}}}\n",
                t = i * 3
            )
        })
        .collect();
    let data = write(dir.path(), "other.jsonl", &lines);
    let out = dir.path().join("run");
    ok(&eval(
        dir.path(),
        &[
            "--data",
            data.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--baselines",
            "none",
            "--group-by",
            "topic",
        ],
    ));
    let lines = items(&out);
    assert_eq!(lines.len(), 6);
    for l in &lines {
        let n: u64 = l["item"].as_str().unwrap().parse().unwrap();
        assert_eq!(l["reference"], n * 3, "{l}");
        assert!(
            l["question"]
                .as_str()
                .unwrap()
                .starts_with(&format!("What is {n} times 3"))
        );
        let topic = if n.is_multiple_of(2) { "even" } else { "odd" };
        assert_eq!(
            l["metadata"],
            serde_json::json!({"topic": topic, "source": format!("s{n}")}),
            "{l}"
        );
    }
    let r = report(&out);
    let groups = r["groups"].to_string();
    assert!(
        groups.contains("\"even\"") && groups.contains("\"odd\""),
        "{groups}"
    );
}
