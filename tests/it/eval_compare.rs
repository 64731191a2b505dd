//! `massgen eval compare` from outside: two runs of the real binary on the simulator, the
//! same questions, B's agents much less accurate than A's (the simulator's `accuracy=P`),
//! so B is worse beyond doubt; the printed numbers are checked against arithmetic on the
//! two `items.jsonl`, and the exit codes (1 worse, 0 not, 2 unusable) against the flags.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;

use crate::eval::{eval, items, ok, questions};
use crate::support::{Proc, bin, mock_upstream, offline, panel_yaml, run_bounded, write};

const LIMIT: Duration = Duration::from_secs(60);

fn compare(dir: &Path, args: &[&str]) -> Output {
    let mut cmd = std::process::Command::new(bin());
    offline(&mut cmd);
    cmd.args(["eval", "compare"])
        .args(args)
        .current_dir(dir)
        .env("RUST_LOG", "error");
    run_bounded(cmd, LIMIT)
}

/// Three agents right with probability `accuracy`; priced or not.
fn panel(mock: &Proc, accuracy: f64, priced: bool) -> String {
    let models: Vec<String> = (1..=3)
        .map(|i| format!("m{i}:accuracy={accuracy},seed={i}{i},ttft_ms=5,token_ms=1,words=10"))
        .collect();
    let models: Vec<&str> = models.iter().map(String::as_str).collect();
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

/// One run of the panel `team` (the config's stem, so both runs' arm has that name).
fn run(dir: &Path, name: &str, yaml: &str, data: &Path) -> std::path::PathBuf {
    let folder = dir.join(name);
    std::fs::create_dir(&folder).unwrap();
    let config = write(&folder, "team.yaml", yaml);
    let out = folder.join("out");
    let output = eval(
        dir,
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
            "8",
        ],
    );
    ok(&output);
    out
}

/// Each item of `arm` by its newest line: (right, cost).
fn graded(out: &Path, arm: &str) -> BTreeMap<String, (bool, Option<f64>)> {
    items(out)
        .into_iter()
        .filter(|it| it["arm"] == arm)
        .map(|it| {
            let right = it["correct"] == true && it.get("failed").is_none_or(Value::is_null);
            (
                it["item"].as_str().unwrap().to_string(),
                (right, it["cost_usd"].as_f64()),
            )
        })
        .collect()
}

/// Two-sided exact McNemar (a binomial test at 1/2 on the discordant pairs).
fn mcnemar(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let mut tail = 0.0;
    let mut choose = 1.0_f64;
    for k in 0..=b.min(c) {
        if k > 0 {
            choose = choose * (n - k + 1) as f64 / k as f64;
        }
        tail += choose;
    }
    (2.0 * tail / 2f64.powi(n as i32)).min(1.0)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_worse_run_fails_the_gate_and_a_run_against_itself_passes() {
    let mock = mock_upstream();
    let dir = tempfile::tempdir().unwrap();
    let data = write(dir.path(), "q.jsonl", &questions(30));
    let a = run(dir.path(), "a", &panel(&mock, 0.95, true), &data);
    let b = run(dir.path(), "b", &panel(&mock, 0.3, false), &data);
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());

    // B against A, gated at 5 points: exit 1, the arm named on stderr in one line.
    let gated = compare(dir.path(), &[a_s, b_s, "--fail-if-worse", "5"]);
    assert_eq!(
        gated.status.code(),
        Some(1),
        "{}{}",
        stdout(&gated),
        stderr(&gated)
    );
    let lines: Vec<String> = stderr(&gated)
        .lines()
        .filter(|l| l.starts_with("eval compare:"))
        .map(str::to_string)
        .collect();
    assert_eq!(lines.len(), 1, "{}", stderr(&gated));
    assert!(lines[0].contains("team: \u{2212}"), "{}", lines[0]);
    let md = stdout(&gated);
    assert!(
        md.starts_with("B is worse than A on 1 of 1 arm (team: \u{2212}"),
        "{md}"
    );
    assert!(md.contains("a failed result counts as wrong"), "{md}");

    // The numbers, from the two items.jsonl.
    let (ga, gb) = (graded(&a, "team"), graded(&b, "team"));
    assert_eq!((ga.len(), gb.len()), (30, 30));
    let (mut both, mut b_only, mut a_only, mut neither) = (0u64, 0u64, 0u64, 0u64);
    for (id, (ra, _)) in &ga {
        match (*ra, gb[id].0) {
            (true, true) => both += 1,
            (false, true) => b_only += 1,
            (true, false) => a_only += 1,
            (false, false) => neither += 1,
        }
    }
    let acc = |g: &BTreeMap<String, (bool, Option<f64>)>| {
        g.values().filter(|(r, _)| *r).count() as f64 / g.len() as f64
    };
    let difference = 100.0 * (b_only as f64 - a_only as f64) / 30.0;
    let json = compare(dir.path(), &[a_s, b_s, "--json"]);
    assert_eq!(json.status.code(), Some(0), "{}", stderr(&json));
    let c: Value = serde_json::from_str(&stdout(&json)).unwrap();
    let arm = &c["arms"][0];
    assert_eq!(c["arms"].as_array().unwrap().len(), 1, "{c}");
    assert_eq!(arm["arm"], "team");
    assert_eq!(arm["pairs"], 30);
    assert_eq!(
        [
            &arm["both_right"],
            &arm["b_right_a_wrong"],
            &arm["a_right_b_wrong"],
            &arm["both_wrong"]
        ],
        [both, b_only, a_only, neither]
    );
    assert!(
        (arm["a"]["accuracy"].as_f64().unwrap() - acc(&ga)).abs() < 1e-12,
        "{arm}"
    );
    assert!(
        (arm["b"]["accuracy"].as_f64().unwrap() - acc(&gb)).abs() < 1e-12,
        "{arm}"
    );
    let d = arm["difference_points"].as_f64().unwrap();
    assert!((d - difference).abs() < 1e-9, "{d} vs {difference}");
    assert!(difference < -40.0, "the simulator's drop: {difference}");
    let p = arm["p_value"].as_f64().unwrap();
    let expected_p = mcnemar(b_only, a_only);
    assert!(
        (p - expected_p).abs() <= 1e-9 * expected_p.max(1e-300),
        "{p} vs {expected_p}"
    );
    let ci = arm["ci95_points"].as_array().unwrap();
    let (lo, hi) = (ci[0].as_f64().unwrap(), ci[1].as_f64().unwrap());
    assert!(
        -100.0 <= lo && lo < d && d < hi && hi < 0.0,
        "{lo} {d} {hi}"
    );
    let cost_a: f64 = ga.values().map(|(_, c)| c.unwrap()).sum::<f64>() / 30.0;
    let printed = arm["a"]["cost_per_item_usd"].as_f64().unwrap();
    assert!(
        cost_a > 0.0 && (printed - cost_a).abs() < 1e-12,
        "{printed} vs {cost_a}"
    );
    assert!(
        arm["b"]["cost_per_item_usd"].is_null(),
        "B is unpriced: {arm}"
    );
    assert_eq!(arm["significant"], true);
    // The Markdown row says the same, to its decimals.
    let row = format!(
        "| team | {:.1}% ({}/30) | {:.1}% ({}/30) |",
        100.0 * acc(&ga),
        both + a_only,
        100.0 * acc(&gb),
        both + b_only
    );
    assert!(md.contains(&row), "{row} in {md}");
    assert!(
        md.contains(&format!("\u{2212}{:.1} [", -difference)),
        "{md}"
    );
    assert!(md.contains("| unknown |"), "B's cost is unknown: {md}");

    // Not worse by more than the gap itself: exit 0.
    let wide = format!("{}", -difference + 1.0);
    let passed = compare(dir.path(), &[a_s, b_s, "--fail-if-worse", &wide]);
    assert_eq!(passed.status.code(), Some(0), "{}", stderr(&passed));

    // A against itself: a difference of 0, exit 0.
    let same = compare(dir.path(), &[a_s, a_s, "--fail-if-worse", "5", "--json"]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    let c: Value = serde_json::from_str(&stdout(&same)).unwrap();
    assert_eq!(c["arms"][0]["difference_points"], 0.0, "{c}");
    assert_eq!(c["arms"][0]["p_value"], 1.0, "{c}");
    let same_md = stdout(&compare(dir.path(), &[a_s, a_s]));
    assert!(
        same_md.starts_with("B does not differ significantly from A"),
        "{same_md}"
    );
    assert!(same_md.contains("| 0.0 ["), "{same_md}");
}

#[test]
fn unusable_folders_and_flags_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = d.join("good");
    std::fs::create_dir(&good).unwrap();
    let line = r#"{"item":"q1","arm":"team","kind":"panel","correct":true,"cost_usd":null,"input_tokens":0,"output_tokens":0,"latency_s":0.1,"session_ids":[]}"#;
    write(&good, "items.jsonl", &format!("{line}\n"));
    let empty = d.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (g, e) = (good.to_str().unwrap(), empty.to_str().unwrap());
    let missing = d.join("missing");
    let m = missing.to_str().unwrap();
    let cases: [(&[&str], &str); 5] = [
        (&[g, m], "DIR_B"),
        (&[m, g], "DIR_A"),
        (&[g, e], "no items.jsonl"),
        (&[g, g, "--fail-if-worse", "-1"], "at least 0"),
        (&[g, g, "--fail-if-worse", "abc"], "abc"),
    ];
    for (args, says) in cases {
        let o = compare(d, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}: {}", stdout(&o));
    }
    // The good folder against itself: fine.
    let o = compare(d, &[g, g, "--fail-if-worse", "0"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A run's flag beside `compare` is refused, not ignored.
    let mut cmd = std::process::Command::new(bin());
    offline(&mut cmd);
    cmd.args(["eval", "--limit", "3", "compare", g, g])
        .current_dir(d);
    let o = run_bounded(cmd, LIMIT);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
