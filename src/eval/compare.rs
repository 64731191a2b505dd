//! `massgen eval compare A B`: two runs' folders side by side, arm by arm (matched by
//! name): each run's accuracy and cost per item, and B minus A paired on the items both
//! graded on the arm, with the same interval and exact McNemar test as the verdict
//! ([`PairedTable`]). Built from the two `items.jsonl` alone, each (item, arm) by its
//! newest line as the report reads it, a failed result counting as wrong.

use std::path::Path;

use serde::Serialize;

use super::files::{ITEMS_FILE, MAX_RUN_FILE, RUN_FILE, RunFile, read_items};
use super::regular::{self, Links};
use super::report::{ArmItems, is_correct, md_escape, usd};
use super::stats::PairedTable;
use super::verdict::{ALPHA, p_text, pct, points};
use crate::app::evals::ItemResult;

/// The most of an `items.jsonl` read: 100,000 items on a few arms with long answers fit;
/// a larger file is refused rather than held.
pub const MAX_ITEMS_FILE: u64 = 1024 * 1024 * 1024;

/// One run's results on one arm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Side {
    /// Items graded on the arm, failed ones included.
    pub n: u64,
    pub correct: u64,
    pub failures: u64,
    /// `correct / n` (0 without items).
    pub accuracy: f64,
    /// `None` when a call had no price (unknown, never free).
    pub cost_per_item_usd: Option<f64>,
}

/// One arm both runs have, B against A.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArmComparison {
    pub arm: String,
    pub a: Side,
    pub b: Side,
    /// Items both runs graded on the arm: what the difference is paired on.
    pub pairs: u64,
    pub both_right: u64,
    pub b_right_a_wrong: u64,
    pub a_right_b_wrong: u64,
    pub both_wrong: u64,
    /// B's accuracy minus A's on the paired items, in points; `None` without pairs.
    pub difference_points: Option<f64>,
    /// Newcombe's paired score interval of the difference, in points.
    pub ci95_points: Option<[f64; 2]>,
    /// The exact McNemar test on the items only one run got right.
    pub p_value: Option<f64>,
    pub significant: bool,
    /// Items of the arm one run graded and the other did not (left out of the pairs).
    pub items_only_in_a: u64,
    pub items_only_in_b: u64,
}

impl ArmComparison {
    /// B is worse than A by more than `points` points, and McNemar's p is below 0.05.
    pub fn worse_by_more_than(&self, threshold: f64) -> bool {
        self.significant && self.difference_points.is_some_and(|d| d < -threshold)
    }

    /// "team: −12.0 points [−20.1, −3.9], p = 0.004".
    pub fn brief(&self) -> String {
        match (self.difference_points, self.ci95_points, self.p_value) {
            (Some(d), Some([lo, hi]), Some(p)) => format!(
                "{}: {} points [{}, {}], p {}",
                self.arm,
                points(d),
                points(lo),
                points(hi),
                p_text(p)
            ),
            _ => format!("{}: no item graded in both", self.arm),
        }
    }
}

/// Two runs compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The folders as given.
    pub a: String,
    pub b: String,
    /// The comparison in one sentence.
    pub sentence: String,
    /// The arms both runs have, in the order A first graded them.
    pub arms: Vec<ArmComparison>,
    pub arms_only_in_a: Vec<String>,
    pub arms_only_in_b: Vec<String>,
}

impl Comparison {
    /// The arms where B is worse by more than `threshold` points with p < 0.05.
    pub fn worse_by_more_than(&self, threshold: f64) -> Vec<&ArmComparison> {
        self.arms
            .iter()
            .filter(|a| a.worse_by_more_than(threshold))
            .collect()
    }
}

/// What a run's folder keeps: its arms in the run's order (`run.json`'s, then any other
/// in the order `items.jsonl` first names it) and its graded results.
pub struct Run {
    pub arms: Vec<String>,
    pub items: Vec<ItemResult>,
}

/// The run a folder keeps. A folder without `items.jsonl` is not a run; one without
/// `run.json` (kept by hand, say) is read from `items.jsonl` alone.
pub fn read_run(dir: &Path) -> Result<Run, String> {
    let shown = dir.display();
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(format!("{shown}: not a folder")),
        Err(e) => return Err(format!("{shown}: {e}")),
    }
    let text = match regular::read(&dir.join(ITEMS_FILE), Links::Refuse, MAX_ITEMS_FILE) {
        Ok(text) => text,
        Err(e) if e.is_missing() => {
            return Err(format!(
                "{shown}: no {ITEMS_FILE} there: not the --out folder of a `massgen eval` run"
            ));
        }
        Err(e) => return Err(format!("{shown}: {ITEMS_FILE}: {e}")),
    };
    let (items, _) = read_items(&text).map_err(|e| format!("{shown}: {ITEMS_FILE}: {e}"))?;
    if items.is_empty() {
        return Err(format!(
            "{shown}: {ITEMS_FILE} holds no graded item: nothing to compare"
        ));
    }
    let mut arms: Vec<String> =
        match regular::read(&dir.join(RUN_FILE), Links::Refuse, MAX_RUN_FILE) {
            Ok(text) => serde_json::from_str::<RunFile>(&text)
                .map_err(|e| format!("{shown}: {RUN_FILE} is not a run's file ({e})"))?
                .arms
                .into_iter()
                .map(|a| a.name)
                .collect(),
            Err(e) if e.is_missing() => Vec::new(),
            Err(e) => return Err(format!("{shown}: {RUN_FILE}: {e}")),
        };
    for it in &items {
        if !arms.contains(&it.arm) {
            arms.push(it.arm.clone());
        }
    }
    // An arm run.json names but no line graded is not the run's to compare.
    arms.retain(|name| items.iter().any(|it| &it.arm == name));
    Ok(Run { arms, items })
}

fn side(items: &ArmItems<'_>) -> Side {
    let n = items.list.len() as u64;
    let correct = items.list.iter().filter(|it| is_correct(it)).count() as u64;
    let cost: Option<f64> = items.list.iter().map(|it| it.cost_usd).sum();
    Side {
        n,
        correct,
        failures: items.list.iter().filter(|it| it.failed.is_some()).count() as u64,
        accuracy: if n == 0 {
            0.0
        } else {
            correct as f64 / n as f64
        },
        cost_per_item_usd: cost.filter(|_| n > 0).map(|c| c / n as f64),
    }
}

fn arm_comparison(arm: &str, a: &ArmItems<'_>, b: &ArmItems<'_>) -> ArmComparison {
    // B first: the table's difference is then B minus A.
    let mut table = PairedTable::default();
    let mut only_in_b = 0;
    for theirs in &b.list {
        match a.get(&theirs.item) {
            Some(ours) => table.add(is_correct(theirs), is_correct(ours)),
            None => only_in_b += 1,
        }
    }
    let pairs = table.pairs();
    let paired = pairs > 0;
    let (lo, hi) = table.ci95();
    let p = table.p_value();
    ArmComparison {
        arm: arm.to_string(),
        a: side(a),
        b: side(b),
        pairs,
        both_right: table.both_right,
        b_right_a_wrong: table.first_only,
        a_right_b_wrong: table.second_only,
        both_wrong: table.both_wrong,
        difference_points: paired.then(|| 100.0 * table.difference()),
        ci95_points: paired.then_some([100.0 * lo, 100.0 * hi]),
        p_value: paired.then_some(p),
        significant: paired && p < ALPHA,
        items_only_in_a: a.list.len() as u64 - pairs,
        items_only_in_b: only_in_b,
    }
}

/// Run B against run A, on the arms both have in A's order. An error when the two share
/// no arm.
pub fn compare(a_dir: &str, a: &Run, b_dir: &str, b: &Run) -> Result<Comparison, String> {
    let a_names: Vec<&str> = a.arms.iter().map(String::as_str).collect();
    let b_names: Vec<&str> = b.arms.iter().map(String::as_str).collect();
    let arms: Vec<ArmComparison> = a_names
        .iter()
        .filter(|name| b_names.contains(name))
        .map(|name| {
            arm_comparison(
                name,
                &ArmItems::collect(name, &a.items),
                &ArmItems::collect(name, &b.items),
            )
        })
        .collect();
    if arms.is_empty() {
        return Err(format!(
            "the runs share no arm: A ({a_dir}) has {}, B ({b_dir}) has {}",
            a_names.join(", "),
            b_names.join(", ")
        ));
    }
    let only = |these: &[&str], those: &[&str]| -> Vec<String> {
        these
            .iter()
            .filter(|n| !those.contains(n))
            .map(|n| n.to_string())
            .collect()
    };
    Ok(Comparison {
        a: a_dir.to_string(),
        b: b_dir.to_string(),
        sentence: sentence(&arms),
        arms_only_in_a: only(&a_names, &b_names),
        arms_only_in_b: only(&b_names, &a_names),
        arms,
    })
}

fn arms_word(n: usize) -> &'static str {
    if n == 1 { "arm" } else { "arms" }
}

/// "B is worse than A on 1 of 3 arms (team: −12.0 points [−20.1, −3.9], p = 0.004)."
fn sentence(arms: &[ArmComparison]) -> String {
    let n = arms.len();
    let differing = |worse: bool| -> Vec<&ArmComparison> {
        arms.iter()
            .filter(|a| a.significant)
            .filter(|a| a.difference_points.is_some_and(|d| (d < 0.0) == worse))
            .collect()
    };
    let (worse, better) = (differing(true), differing(false));
    let list = |these: &[&ArmComparison]| -> String {
        these
            .iter()
            .map(|a| a.brief())
            .collect::<Vec<_>>()
            .join("; ")
    };
    match (worse.is_empty(), better.is_empty()) {
        (false, true) => format!(
            "B is worse than A on {} of {n} {} ({}).",
            worse.len(),
            arms_word(n),
            list(&worse)
        ),
        (true, false) => format!(
            "B is better than A on {} of {n} {} ({}).",
            better.len(),
            arms_word(n),
            list(&better)
        ),
        (false, false) => format!(
            "B is worse than A on {} of {n} arms ({}) and better on {} ({}).",
            worse.len(),
            list(&worse),
            better.len(),
            list(&better)
        ),
        (true, true) if n == 1 => format!(
            "B does not differ significantly from A on the one arm both ran ({}).",
            list(&arms.iter().collect::<Vec<_>>())
        ),
        (true, true) => format!(
            "B does not differ significantly from A on any of the {n} arms both ran \
             (McNemar p \u{2265} 0.05 on each)."
        ),
    }
}

fn accuracy_cell(s: &Side) -> String {
    format!("{} ({}/{})", pct(s.accuracy), s.correct, s.n)
}

fn cost_cell(c: Option<f64>) -> String {
    c.map_or_else(|| "unknown".to_string(), usd)
}

/// The sentence, then a table with a row per arm both runs have, then what was left out.
pub fn markdown(c: &Comparison) -> String {
    let mut out = format!("{}\n\n", c.sentence);
    out.push_str(&format!(
        "A: {}; B: {}. B \u{2212} A is paired on the items both runs graded on the arm; a \
         failed result counts as wrong.\n\n",
        md_escape(&c.a),
        md_escape(&c.b)
    ));
    out.push_str(
        "| arm | accuracy A | accuracy B | cost/item A | cost/item B | paired items | \
         B \u{2212} A (points) [95% CI] | McNemar p | B only / A only right | failed A / B |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|\n");
    for arm in &c.arms {
        let (difference, p) = match (arm.difference_points, arm.ci95_points, arm.p_value) {
            (Some(d), Some([lo, hi]), Some(p)) => (
                format!("{} [{}, {}]", points(d), points(lo), points(hi)),
                p_text(p).trim_start_matches("= ").to_string(),
            ),
            _ => ("no item in both".to_string(), "-".to_string()),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {difference} | {p} | {} / {} | {} / {} |\n",
            md_escape(&arm.arm),
            accuracy_cell(&arm.a),
            accuracy_cell(&arm.b),
            cost_cell(arm.a.cost_per_item_usd),
            cost_cell(arm.b.cost_per_item_usd),
            arm.pairs,
            arm.b_right_a_wrong,
            arm.a_right_b_wrong,
            arm.a.failures,
            arm.b.failures,
        ));
    }
    let mut notes = Vec::new();
    for arm in &c.arms {
        if arm.items_only_in_a > 0 || arm.items_only_in_b > 0 {
            notes.push(format!(
                "{}: {} items only in A and {} only in B, left out of the difference.",
                md_escape(&arm.arm),
                arm.items_only_in_a,
                arm.items_only_in_b
            ));
        }
    }
    let names = |v: &[String]| {
        v.iter()
            .map(|n| md_escape(n))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !c.arms_only_in_a.is_empty() {
        notes.push(format!(
            "Arms only in A (not compared): {}.",
            names(&c.arms_only_in_a)
        ));
    }
    if !c.arms_only_in_b.is_empty() {
        notes.push(format!(
            "Arms only in B (not compared): {}.",
            names(&c.arms_only_in_b)
        ));
    }
    if !notes.is_empty() {
        out.push('\n');
        for note in notes {
            out.push_str(&format!("- {note}\n"));
        }
    }
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;
    use crate::app::evals::ArmKind;

    fn result(item: &str, arm: &str, correct: bool, failed: bool, cost: Option<f64>) -> ItemResult {
        ItemResult {
            item: item.into(),
            arm: arm.into(),
            kind: ArmKind::Panel,
            correct,
            failed: failed.then(|| "upstream down".to_string()),
            answer: None,
            extracted: None,
            samples: Vec::new(),
            sample_answers: Vec::new(),
            members: Vec::new(),
            question: None,
            reference: None,
            metadata: serde_json::Map::new(),
            cost_usd: cost,
            judge_cost_usd: None,
            input_tokens: 0,
            output_tokens: 0,
            latency_s: 0.1,
            session_ids: Vec::new(),
            judge_session_ids: Vec::new(),
            fingerprint: String::new(),
            grading: String::new(),
        }
    }

    /// A run without `run.json`: its arms in the order its lines name them.
    fn run(items: Vec<ItemResult>) -> Run {
        let mut arms: Vec<String> = Vec::new();
        for it in &items {
            if !arms.contains(&it.arm) {
                arms.push(it.arm.clone());
            }
        }
        Run { arms, items }
    }

    #[test]
    fn paired_on_shared_items_newest_line_failures_wrong() {
        let mut a = Vec::new();
        let mut b = Vec::new();
        for i in 0..20 {
            a.push(result(&format!("q{i}"), "team", true, false, Some(0.01)));
            // B right on the first 5 only; item 5's first line said right, its newer
            // line failed (and claims correct: a failure is wrong whatever it says).
            b.push(result(&format!("q{i}"), "team", i < 6, false, None));
        }
        b.push(result("q5", "team", true, true, None));
        a.push(result("q99", "team", true, false, Some(0.01)));
        b.push(result("q77", "team", false, false, None));
        a.push(result("q1", "agent:a", true, false, Some(0.0)));
        b.push(result("q1", "agent:b", true, false, Some(0.0)));
        let c = compare("ra", &run(a), "rb", &run(b)).unwrap();
        assert_eq!(c.arms.len(), 1);
        let t = &c.arms[0];
        assert_eq!((t.a.n, t.a.correct), (21, 21));
        assert_eq!((t.b.n, t.b.correct, t.b.failures), (21, 5, 1));
        assert_eq!(t.pairs, 20);
        assert_eq!(
            (t.both_right, t.a_right_b_wrong, t.b_right_a_wrong),
            (5, 15, 0)
        );
        assert_eq!((t.items_only_in_a, t.items_only_in_b), (1, 1));
        assert!((t.difference_points.unwrap() + 75.0).abs() < 1e-9);
        let mut table = PairedTable::default();
        for i in 0..20 {
            table.add(i < 5, true);
        }
        assert_eq!(t.p_value, Some(table.p_value()));
        let (lo, hi) = table.ci95();
        assert_eq!(t.ci95_points, Some([100.0 * lo, 100.0 * hi]));
        assert!(t.significant && t.worse_by_more_than(5.0) && !t.worse_by_more_than(80.0));
        assert!((t.a.cost_per_item_usd.unwrap() - 0.01).abs() < 1e-12);
        assert_eq!(t.b.cost_per_item_usd, None);
        assert_eq!(c.arms_only_in_a, vec!["agent:a".to_string()]);
        assert_eq!(c.arms_only_in_b, vec!["agent:b".to_string()]);
        assert!(
            c.sentence
                .starts_with("B is worse than A on 1 of 1 arm (team: \u{2212}75.0 points ["),
            "{}",
            c.sentence
        );
        let md = markdown(&c);
        assert!(md.starts_with(&c.sentence), "{md}");
        assert!(
            md.contains("| team | 100.0% (21/21) | 23.8% (5/21) | $0.0100 | unknown | 20 |"),
            "{md}"
        );
        assert!(
            md.contains("team: 1 items only in A and 1 only in B"),
            "{md}"
        );
        assert!(
            md.contains("Arms only in A (not compared): agent:a."),
            "{md}"
        );
    }

    #[test]
    fn a_run_against_itself_and_runs_with_no_arm_in_common() {
        let a: Vec<ItemResult> = (0..10)
            .map(|i| result(&format!("q{i}"), "team", i % 3 == 0, false, Some(0.0)))
            .collect();
        let a = run(a);
        let c = compare("r", &a, "r", &a).unwrap();
        let t = &c.arms[0];
        assert_eq!(t.difference_points, Some(0.0));
        assert_eq!(t.p_value, Some(1.0));
        assert!(!t.significant && !t.worse_by_more_than(0.0));
        assert!(
            c.sentence.starts_with("B does not differ significantly"),
            "{}",
            c.sentence
        );
        let other: Vec<ItemResult> = vec![result("q1", "solo", true, false, None)];
        let e = compare("r", &a, "s", &run(other)).unwrap_err();
        assert!(e.contains("share no arm"), "{e}");
    }
}
