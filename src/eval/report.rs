//! The report of a run (`report.json`, `report.md`): the verdict (`verdict`), per arm
//! accuracy with its 95% interval, what it cost, how long it took, and a paired test
//! against the panel, and per group with `--group-by` (`groups`). Built from the graded
//! items alone, so a report can be rebuilt from `items.jsonl`.

use serde::{Deserialize, Serialize};

pub(super) use super::arm_items::{ArmItems, is_correct};
use super::groups::{self, Groups};
use super::stats::{PairedTable, percentile, wilson};
use super::verdict::{self, Verdict, spelled};
use crate::app::evals::{ArmInfo, ArmKind, ItemResult};

/// What was run, for the report's heading.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub run_id: String,
    /// Unix seconds.
    pub created: u64,
    /// The data file's path as the user gave it.
    pub data: String,
    pub grader: String,
    pub questions: usize,
    pub max_cost_usd: Option<f64>,
    /// The budget ran out before every item was run on every arm.
    pub stopped_by_budget: bool,
    /// Ctrl-C stopped the run before every item started (a rerun continues it).
    #[serde(default)]
    pub interrupted: bool,
    /// Why the run stopped before every item started; absent when none was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped: Option<Stopped>,
    /// `--group-by`: the metadata key the items are grouped by.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<String>,
}

/// Why a run started no new item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stopped {
    pub reason: StopReason,
    /// One sentence for people: what was reached.
    pub message: String,
    /// The error most failed results gave (`reason: failures`), as a session gave it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub most_common_error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// Too many (item, arm) results failed (`--max-failures`, `--max-failure-rate`).
    Failures,
    /// `--max-cost-usd` was spent.
    Budget,
    /// Ctrl-C or SIGTERM.
    Interrupted,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub run: RunInfo,
    /// The panel against its best member and its best self-consistency arm; `None`
    /// without a panel arm.
    #[serde(default)]
    pub verdict: Option<Verdict>,
    pub arms: Vec<ArmReport>,
    /// Every arm's cost plus the judge's; `None` when an arm is unpriced.
    pub total_cost_usd: Option<f64>,
    /// The judge's cost over all arms; `None` when no item had one.
    pub judge_cost_usd: Option<f64>,
    /// Accuracy per value of `run.group_by`; `None` without `--group-by`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Groups>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArmReport {
    pub name: String,
    pub kind: ArmKind,
    pub samples: u32,
    pub models: Vec<String>,
    /// Items graded on the arm, failed ones included.
    pub n: u64,
    pub correct: u64,
    /// `correct / n`; 0 when `n = 0`.
    pub accuracy: f64,
    /// Wilson 95% interval of the accuracy.
    pub ci95: [f64; 2],
    /// `None` when some item of the arm had a call without a price.
    pub cost_usd: Option<f64>,
    pub cost_per_item_usd: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub latency_p50_s: Option<f64>,
    pub latency_p95_s: Option<f64>,
    pub failures: u64,
    pub judge_cost_usd: Option<f64>,
    /// This arm against the reference panel arm on the items both have; `None` for the
    /// reference itself and when the run has no panel arm.
    pub vs_panel: Option<Paired>,
}

/// A paired comparison of an arm against the reference arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Paired {
    /// The reference arm's name.
    pub against: String,
    /// Items both arms have.
    pub pairs: u64,
    /// This arm right, the reference wrong.
    pub wins: u64,
    /// Both right or both wrong.
    pub ties: u64,
    /// This arm wrong, the reference right.
    pub losses: u64,
    /// The ties both got right (absent from reports of earlier versions).
    #[serde(default)]
    pub both_right: u64,
    /// The ties both got wrong.
    #[serde(default)]
    pub both_wrong: u64,
    pub p_value: f64,
    /// The test behind `p_value`: `mcnemar_exact`.
    pub test: String,
}

/// `Some(sum)` when every value is present (an empty list costs 0), else `None`.
fn sum_all(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    values.sum()
}

fn paired(this: &ArmItems<'_>, reference: &ArmItems<'_>, against: &str) -> Paired {
    // This arm first: its wins are the items only it got right.
    let mut table = PairedTable::default();
    for it in &this.list {
        if let Some(other) = reference.get(&it.item) {
            table.add(is_correct(it), is_correct(other));
        }
    }
    Paired {
        against: against.to_string(),
        pairs: table.pairs(),
        wins: table.first_only,
        ties: table.both_right + table.both_wrong,
        losses: table.second_only,
        both_right: table.both_right,
        both_wrong: table.both_wrong,
        p_value: table.p_value(),
        test: "mcnemar_exact".to_string(),
    }
}

/// What the judge cost over `items`: `None` when none was judged, or when a judged one has
/// no price (unknown, never free).
fn judge_cost<'a>(items: impl Iterator<Item = &'a ItemResult>) -> Option<f64> {
    let mut judged = items
        .filter(|it| !it.judge_session_ids.is_empty() || it.judge_cost_usd.is_some())
        .map(|it| it.judge_cost_usd)
        .peekable();
    judged.peek()?;
    sum_all(judged)
}

fn arm_report(arm: &ArmInfo, items: &ArmItems<'_>) -> ArmReport {
    let list = &items.list;
    let n = list.len() as u64;
    let correct = list.iter().filter(|it| is_correct(it)).count() as u64;
    let cost_usd = sum_all(list.iter().map(|it| it.cost_usd));
    let mut latencies: Vec<f64> = list
        .iter()
        .map(|it| it.latency_s)
        .filter(|l| l.is_finite())
        .collect();
    latencies.sort_by(f64::total_cmp);
    let (lo, hi) = wilson(correct, n);
    ArmReport {
        name: arm.name.clone(),
        kind: arm.kind,
        samples: arm.samples,
        models: arm.models.clone(),
        n,
        correct,
        accuracy: if n == 0 {
            0.0
        } else {
            correct as f64 / n as f64
        },
        ci95: [lo, hi],
        cost_usd,
        cost_per_item_usd: cost_usd.filter(|_| n > 0).map(|c| c / n as f64),
        input_tokens: list.iter().map(|it| it.input_tokens).sum(),
        output_tokens: list.iter().map(|it| it.output_tokens).sum(),
        latency_p50_s: percentile(&latencies, 0.5),
        latency_p95_s: percentile(&latencies, 0.95),
        failures: list.iter().filter(|it| it.failed.is_some()).count() as u64,
        judge_cost_usd: judge_cost(list.iter().copied()),
        vs_panel: None,
    }
}

/// The report of `arms` (in their order) over `items`. The reference of `vs_panel` and of
/// the verdict is the first arm of kind `panel`.
pub fn build(run: RunInfo, arms: &[ArmInfo], items: &[ItemResult]) -> Report {
    let per_arm: Vec<ArmItems<'_>> = arms
        .iter()
        .map(|arm| ArmItems::collect(&arm.name, items))
        .collect();
    let reference = arms.iter().position(|arm| arm.kind == ArmKind::Panel);
    let reports: Vec<ArmReport> = arms
        .iter()
        .zip(&per_arm)
        .enumerate()
        .map(|(i, (arm, its))| {
            let mut r = arm_report(arm, its);
            r.vs_panel = reference
                .filter(|&ref_i| ref_i != i)
                .map(|ref_i| paired(its, &per_arm[ref_i], &arms[ref_i].name));
            r
        })
        .collect();
    let judge_cost_usd = judge_cost(per_arm.iter().flat_map(|its| its.list.iter().copied()));
    let shared = shared_cost(per_arm.iter().flat_map(|its| its.list.iter().copied()));
    let judged_unpriced = per_arm
        .iter()
        .flat_map(|its| its.list.iter())
        .any(|it| !it.judge_session_ids.is_empty() && it.judge_cost_usd.is_none());
    let total_cost_usd = sum_all(reports.iter().map(|r| r.cost_usd))
        .filter(|_| !judged_unpriced)
        .map(|c| c - shared + judge_cost_usd.unwrap_or(0.0));
    let groups = run
        .group_by
        .as_deref()
        .map(|key| groups::groups(key, arms, &per_arm));
    Report {
        verdict: verdict::verdict(arms, &per_arm),
        run,
        arms: reports,
        total_cost_usd,
        judge_cost_usd,
        groups,
    }
}

/// What `items` spent, as far as it is known (arms and judge; every session once):
/// what a resumed run's budget starts from.
pub fn known_spend(items: &[ItemResult]) -> f64 {
    let known: f64 = items
        .iter()
        .map(|it| it.cost_usd.unwrap_or(0.0) + it.judge_cost_usd.unwrap_or(0.0))
        .sum();
    known - shared_cost(items.iter())
}

/// What agent arms spent on sessions a self-consistency arm counts too (an agent's first
/// sample is its agent-alone answer): the total counts every session once.
fn shared_cost<'a>(items: impl Iterator<Item = &'a ItemResult> + Clone) -> f64 {
    use std::collections::HashSet;
    let sampled: HashSet<(&str, &str)> = items
        .clone()
        .filter(|r| r.kind == ArmKind::SelfConsistency)
        .flat_map(|r| r.session_ids.iter().map(|s| (r.item.as_str(), s.as_str())))
        .collect();
    items
        .filter(|r| r.kind == ArmKind::Agent && !r.session_ids.is_empty())
        .filter(|r| {
            r.session_ids
                .iter()
                .all(|s| sampled.contains(&(r.item.as_str(), s.as_str())))
        })
        .filter_map(|r| r.cost_usd)
        .sum()
}

/// A name or path made safe for one Markdown table cell or line.
pub(super) fn md_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// USD with enough digits for per-item costs of a fraction of a cent.
pub(super) fn usd(v: f64) -> String {
    if v == 0.0 {
        "$0".to_string()
    } else if v.abs() >= 0.01 {
        format!("${v:.4}")
    } else {
        format!("${v:.6}")
    }
}

fn p_value(p: f64) -> String {
    if p < 0.001 {
        "<0.001".to_string()
    } else {
        format!("{p:.3}")
    }
}

fn latency(p50: Option<f64>, p95: Option<f64>) -> String {
    match (p50, p95) {
        (Some(a), Some(b)) => format!("{a:.1} / {b:.1}"),
        _ => "-".to_string(),
    }
}

const UNPRICED: &str = "n/a (unpriced)";

fn arm_row(arm: &ArmReport, has_reference: bool) -> String {
    let accuracy = format!(
        "{:.3} [{:.3}, {:.3}]",
        arm.accuracy, arm.ci95[0], arm.ci95[1]
    );
    let (cost, per_item) = match arm.cost_usd {
        None => (UNPRICED.to_string(), UNPRICED.to_string()),
        Some(c) => (
            usd(c),
            arm.cost_per_item_usd.map_or_else(|| "-".to_string(), usd),
        ),
    };
    // From the panel's side: the panel's only-right items first.
    let vs = match &arm.vs_panel {
        Some(p) if p.both_right + p.both_wrong == p.ties => format!(
            "{} / {} / {} / {} p={}",
            p.losses,
            p.both_right,
            p.both_wrong,
            p.wins,
            p_value(p.p_value)
        ),
        // A report of an earlier version: ties not split.
        Some(p) => format!(
            "{} / {} tied / {} p={}",
            p.losses,
            p.ties,
            p.wins,
            p_value(p.p_value)
        ),
        None if has_reference => "(reference)".to_string(),
        None => "-".to_string(),
    };
    format!(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
        md_escape(&arm.name),
        arm.kind.as_str(),
        arm.n,
        accuracy,
        cost,
        per_item,
        latency(arm.latency_p50_s, arm.latency_p95_s),
        arm.failures,
        vs,
    )
}

/// The report as Markdown, for people: the run, one table row per arm, and the notes a
/// reader needs to trust the numbers (budget stop, judge cost, what the columns mean).
pub fn markdown(report: &Report) -> String {
    let run = &report.run;
    let mut out = format!("# massgen eval: {}\n\n", md_escape(&run.run_id));
    match &report.verdict {
        Some(v) => {
            out += &format!("**{}**\n\n", md_escape(&v.sentence));
            if let (Some(_), Some(sc)) = (&v.vs_best_member, &v.vs_best_self_consistency) {
                out += &format!("{}\n\n", md_escape(&sc.sentence));
            }
        }
        None => out += "**No panel arm in this run, so no verdict.**\n\n",
    }
    out += &format!("- data: {}\n", md_escape(&run.data));
    out += &format!("- grader: {}\n", md_escape(&run.grader));
    out += &format!("- questions: {}\n", run.questions);
    out += &format!("- created: {} (unix seconds)\n\n", run.created);

    let reference = report.arms.iter().find(|a| a.kind == ArmKind::Panel);
    out += "| arm | kind | n | accuracy [95% CI] | cost | cost/item | latency p50 / p95 (s) \
            | failures | panel only / both right / both wrong / arm only |\n";
    out += "|---|---|---:|---|---:|---:|---:|---:|---|\n";
    for arm in &report.arms {
        out += &arm_row(arm, reference.is_some());
    }
    out += "\n";

    match report.total_cost_usd {
        Some(c) => out += &format!("Total cost: {}", usd(c)),
        None => out += &format!("Total cost: {UNPRICED}"),
    }
    match report.judge_cost_usd {
        Some(j) => out += &format!(", of which the judge: {}.\n", usd(j)),
        None => out += ".\n",
    }
    match (run.stopped_by_budget, run.max_cost_usd) {
        (true, max) => {
            let max = max.map_or_else(String::new, |m| format!(" ({})", usd(m)));
            out += &format!(
                "\n**Stopped by the budget{max}**: no new item started once it was reached; \
                 every item that started ran on every arm.\n"
            );
        }
        (false, Some(m)) => out += &format!("\nBudget: {} (not reached).\n", usd(m)),
        (false, None) => {}
    }
    if run.interrupted {
        out += "\n**Interrupted** (Ctrl-C): not every item started; a rerun with the same \
                `--out` continues the run.\n";
    }
    if let Some(stopped) = run
        .stopped
        .as_ref()
        .filter(|s| s.reason == StopReason::Failures)
    {
        out += &format!(
            "\n**Stopped after failures**: {}",
            md_escape(&stopped.message)
        );
        if let Some(error) = &stopped.most_common_error {
            out += &format!(" Most common error: {}", md_escape(error));
        }
        out += "\n";
    }

    out += "\nAccuracy counts failed items as wrong; the interval is Wilson's. ";
    match reference {
        Some(r) => {
            out += &format!(
                "The last column is from the panel's side, on the items both ran: items `{}` \
                 got right and this arm wrong / both right / both wrong / this arm right and \
                 the panel wrong; p is the exact McNemar test.\n",
                r.name.replace('`', "'").replace(['\n', '\r'], " ")
            );
        }
        None => out += "No panel arm, so no paired comparison.\n",
    }
    let models: Vec<String> = report
        .arms
        .iter()
        .filter(|a| !a.models.is_empty())
        .map(|a| {
            let models: Vec<String> = a.models.iter().map(|m| md_escape(m)).collect();
            format!("- {}: {}\n", md_escape(&a.name), models.join(", "))
        })
        .collect();
    if !models.is_empty() {
        out += "\nModels:\n\n";
        out += &models.concat();
    }
    if let Some(v) = &report.verdict {
        out += &verdict_notes(v);
    }
    if let Some(g) = &report.groups {
        out += &groups_table(g);
    }
    out
}

/// The verdict's comparisons in full, each count from the panel's side, and how the
/// numbers are computed.
fn verdict_notes(v: &Verdict) -> String {
    let mut out = String::new();
    for (role, versus) in [
        ("best member", &v.vs_best_member),
        ("best self-consistency arm", &v.vs_best_self_consistency),
    ] {
        let Some(x) = versus else { continue };
        out += &format!(
            "- against its {role}, {}: {} (of {} items both ran)\n",
            md_escape(&x.arm),
            md_escape(&spelled(
                x.panel_right_arm_wrong,
                x.both_right,
                x.both_wrong,
                x.panel_wrong_arm_right,
                &x.arm
            )),
            x.pairs
        );
    }
    if out.is_empty() {
        return out;
    }
    format!(
        "\nVerdict, in counts:\n\n{out}\nThe difference is the panel's accuracy minus the \
         arm's on the items both ran, in points; its interval is Newcombe's paired score \
         interval (1998, method 10); p is the exact McNemar test (significant below 0.05). \
         The items that would settle a difference are Connor's (1987) sample size for \
         McNemar's test at 5% with 80% power, at the rates of items only one got right seen \
         here.\n"
    )
}

/// Per group value, each arm's accuracy, its interval and n.
fn groups_table(g: &Groups) -> String {
    let Some(first) = g.groups.first() else {
        return format!("\nBy `{}`: no item.\n", g.by.replace('`', "'"));
    };
    let mut out = format!(
        "\n## By `{}`\n\n| {} |",
        g.by.replace('`', "'"),
        md_escape(&g.by)
    );
    for arm in &first.arms {
        out += &format!(" {} |", md_escape(&arm.name));
    }
    out += "\n|---|";
    out += &"---|".repeat(first.arms.len());
    out += "\n";
    for group in &g.groups {
        out += &format!("| {} |", md_escape(&group.value));
        for arm in &group.arms {
            out += &match arm.accuracy {
                Some(a) => format!(
                    " {a:.3} [{:.3}, {:.3}] n={} |",
                    arm.ci95[0], arm.ci95[1], arm.n
                ),
                None => " - |".to_string(),
            };
        }
        out += "\n";
    }
    if g.left_out > 0 {
        out += &format!(
            "\n{} more values, each with fewer items, are left out.\n",
            g.left_out
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(name: &str, kind: ArmKind) -> ArmInfo {
        ArmInfo {
            name: name.into(),
            kind,
            samples: 1,
            models: vec!["p/m".into()],
        }
    }

    fn item(id: &str, arm: &str, correct: bool, cost: Option<f64>, latency: f64) -> ItemResult {
        ItemResult {
            item: id.into(),
            arm: arm.into(),
            kind: ArmKind::Agent,
            correct,
            cost_usd: cost,
            input_tokens: 10,
            output_tokens: 5,
            latency_s: latency,
            ..ItemResult::default()
        }
    }

    fn run() -> RunInfo {
        RunInfo {
            run_id: "r1".into(),
            created: 1_700_000_000,
            data: "q.jsonl".into(),
            grader: "exact".into(),
            questions: 4,
            max_cost_usd: None,
            stopped_by_budget: false,
            interrupted: false,
            ..RunInfo::default()
        }
    }

    /// Panel: right on 1-3, wrong on 4. Agent: right on 1 and 4, wrong on 2, failed on 3.
    fn sample() -> (Vec<ArmInfo>, Vec<ItemResult>) {
        let arms = vec![arm("agent:a", ArmKind::Agent), arm("panel", ArmKind::Panel)];
        let mut items = vec![];
        for (id, ok) in [("1", true), ("2", true), ("3", true), ("4", false)] {
            items.push(item(
                id,
                "panel",
                ok,
                Some(0.5),
                f64::from(id.parse::<u8>().unwrap()),
            ));
        }
        items.push(item("1", "agent:a", true, Some(0.1), 1.0));
        items.push(item("2", "agent:a", false, Some(0.1), 1.0));
        let mut failed = item("3", "agent:a", true, None, 9.0);
        failed.failed = Some("every session failed".into());
        items.push(failed);
        // A first try of item 4 that a rerun replaced.
        items.push(item("4", "agent:a", false, None, 1.0));
        items.push(item("4", "agent:a", true, Some(0.1), 1.0));
        (arms, items)
    }

    #[test]
    fn build_counts_costs_and_pairs() {
        let (arms, items) = sample();
        let r = build(run(), &arms, &items);
        assert_eq!(r.arms.len(), 2);
        let (agent, panel) = (&r.arms[0], &r.arms[1]);
        assert_eq!(agent.name, "agent:a");
        assert_eq!((agent.n, agent.correct, agent.failures), (4, 2, 1));
        assert_eq!(agent.accuracy, 0.5);
        let (lo, hi) = wilson(2, 4);
        assert_eq!(agent.ci95, [lo, hi]);
        // Item 3 had no price: the arm is unpriced.
        assert_eq!(agent.cost_usd, None);
        assert_eq!(agent.cost_per_item_usd, None);
        assert_eq!((agent.input_tokens, agent.output_tokens), (40, 20));
        assert_eq!(agent.latency_p50_s, Some(1.0));
        let p95 = agent.latency_p95_s.unwrap();
        assert!((p95 - 7.8).abs() < 1e-9, "{p95}");
        let vs = agent.vs_panel.as_ref().unwrap();
        assert_eq!(vs.against, "panel");
        assert_eq!((vs.pairs, vs.wins, vs.ties, vs.losses), (4, 1, 1, 2));
        assert_eq!(vs.p_value, 1.0);
        assert_eq!(vs.test, "mcnemar_exact");

        assert_eq!((panel.n, panel.correct, panel.failures), (4, 3, 0));
        assert_eq!(panel.cost_usd, Some(2.0));
        assert_eq!(panel.cost_per_item_usd, Some(0.5));
        assert_eq!(panel.latency_p50_s, Some(2.5));
        assert!(panel.vs_panel.is_none());
        assert_eq!(r.total_cost_usd, None);
        assert_eq!(r.judge_cost_usd, None);
    }

    #[test]
    fn build_totals_judge_and_empty_arms() {
        let arms = vec![
            arm("panel", ArmKind::Panel),
            arm("panel+majority", ArmKind::Panel),
            arm("sc3:a", ArmKind::SelfConsistency),
        ];
        let mut a = item("1", "panel", true, Some(1.0), 1.0);
        a.judge_cost_usd = Some(0.25);
        let b = item("1", "panel+majority", false, Some(0.5), 1.0);
        let mut c = item("2", "panel+majority", true, Some(0.5), 1.0);
        c.judge_cost_usd = Some(0.5);
        let r = build(run(), &arms, &[a, b, c]);
        assert_eq!(r.arms[0].judge_cost_usd, Some(0.25));
        assert_eq!(r.arms[1].judge_cost_usd, Some(0.5));
        // Only item 1 is on both; the second panel arm is compared to the first.
        let vs = r.arms[1].vs_panel.as_ref().unwrap();
        assert_eq!((vs.against.as_str(), vs.pairs, vs.losses), ("panel", 1, 1));
        let empty = &r.arms[2];
        assert_eq!((empty.n, empty.accuracy, empty.ci95), (0, 0.0, [0.0, 1.0]));
        assert_eq!((empty.cost_usd, empty.cost_per_item_usd), (Some(0.0), None));
        assert_eq!((empty.latency_p50_s, empty.judge_cost_usd), (None, None));
        assert_eq!(empty.vs_panel.as_ref().unwrap().pairs, 0);
        assert_eq!(r.judge_cost_usd, Some(0.75));
        assert_eq!(r.total_cost_usd, Some(2.75));
    }

    #[test]
    fn the_total_counts_a_shared_first_sample_once() {
        let arms = vec![
            arm("agent:a", ArmKind::Agent),
            arm("sc3:a", ArmKind::SelfConsistency),
        ];
        let mut alone = item("q1", "agent:a", true, Some(1.0), 1.0);
        alone.session_ids = vec!["s1".into()];
        let mut sc = item("q1", "sc3:a", true, Some(3.0), 1.0);
        sc.kind = ArmKind::SelfConsistency;
        sc.session_ids = vec!["s1".into(), "s2".into(), "s3".into()];
        let r = build(run(), &arms, &[alone.clone(), sc.clone()]);
        assert_eq!(r.arms[0].cost_usd, Some(1.0));
        assert_eq!(r.arms[1].cost_usd, Some(3.0));
        assert_eq!(r.total_cost_usd, Some(3.0));
        // A session of its own (no self-consistency beside it) counts.
        alone.session_ids = vec!["s9".into()];
        assert_eq!(build(run(), &arms, &[alone, sc]).total_cost_usd, Some(4.0));
    }

    #[test]
    fn no_panel_arm_means_no_pairs() {
        let arms = vec![
            arm("agent:a", ArmKind::Agent),
            arm("agent:b", ArmKind::Agent),
        ];
        let items = [item("1", "agent:a", true, Some(0.1), 1.0)];
        let r = build(run(), &arms, &items);
        assert!(r.arms.iter().all(|a| a.vs_panel.is_none()));
        assert_eq!(r.arms[1].n, 0);
        assert!(markdown(&r).contains("No panel arm"));
    }

    #[test]
    fn json_field_names_and_kind() {
        let (arms, items) = sample();
        let r = build(run(), &arms, &items);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["run"]["run_id"], "r1");
        assert_eq!(v["run"]["stopped_by_budget"], false);
        assert!(v["total_cost_usd"].is_null());
        let agent = &v["arms"][0];
        assert_eq!(agent["kind"], "agent");
        assert!(agent["cost_usd"].is_null());
        assert_eq!(agent["vs_panel"]["against"], "panel");
        assert_eq!(agent["ci95"].as_array().unwrap().len(), 2);
        for key in [
            "cost_per_item_usd",
            "latency_p50_s",
            "latency_p95_s",
            "judge_cost_usd",
        ] {
            assert!(agent.get(key).is_some(), "{key}");
        }
        assert_eq!(v["arms"][1]["kind"], "panel");
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn markdown_table_and_notes() {
        let (mut arms, items) = sample();
        arms[0].name = "agent|a".into();
        let items: Vec<ItemResult> = items
            .into_iter()
            .map(|mut it| {
                if it.arm == "agent:a" {
                    it.arm = "agent|a".into();
                }
                it
            })
            .collect();
        let mut info = run();
        info.stopped_by_budget = true;
        info.max_cost_usd = Some(5.0);
        let md = markdown(&build(info, &arms, &items));
        assert!(md.starts_with("# massgen eval: r1\n"), "{md}");
        assert!(md.contains("q.jsonl") && md.contains("exact"));
        assert!(md.contains("| agent\\|a | agent | 4 | 0.500 ["), "{md}");
        assert!(md.contains("| n/a (unpriced) | n/a (unpriced) |"), "{md}");
        assert!(md.contains("| 2 / 1 / 0 / 1 p=1.000 |"), "{md}");
        assert!(md.contains("| panel | panel | 4 | 0.750 ["), "{md}");
        assert!(
            md.contains("| $2.0000 | $0.5000 | 2.5 / 3.8 | 0 | (reference) |"),
            "{md}"
        );
        assert!(md.contains("Total cost: n/a (unpriced)"), "{md}");
        assert!(md.contains("Stopped by the budget ($5.0000)"), "{md}");
        // Every table row has the header's cell count (escaped pipes do not split).
        let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        assert_eq!(rows.len(), 4);
        for row in rows {
            assert_eq!(row.replace("\\|", "").matches('|').count(), 10, "{row}");
        }
    }

    #[test]
    fn markdown_opens_with_the_verdict_and_lists_groups() {
        let (arms, mut items) = sample();
        for it in &mut items {
            let mut m = serde_json::Map::new();
            if it.item != "4" {
                m.insert(
                    "level".into(),
                    serde_json::json!(if it.item == "1" { "easy" } else { "hard" }),
                );
            }
            it.metadata = m;
        }
        let mut info = run();
        info.group_by = Some("level".into());
        let r = build(info, &arms, &items);
        let v = r.verdict.as_ref().unwrap();
        assert_eq!(v.vs_best_member.as_ref().unwrap().arm, "agent:a");
        let md = markdown(&r);
        let second = md.lines().nth(2).unwrap();
        assert!(second.starts_with("**The panel (panel) does not beat its best member (agent:a, 50.0%): 75.0% vs 50.0%, +25.0 points ["), "{md}");
        assert!(second.contains("cost unknown"), "{second}");
        assert!(md.contains("panel right, agent:a wrong: 2; both right: 1; both wrong: 0; panel wrong, agent:a right: 1"), "{md}");
        assert!(md.contains("Newcombe"), "{md}");
        assert!(
            md.contains("## By `level`\n\n| level | agent:a | panel |\n|---|---|---|\n"),
            "{md}"
        );
        assert!(md.contains("| easy | 1.000 ["), "{md}");
        assert!(
            md.contains("| (none) | 1.000 [") && md.contains("n=1 |"),
            "{md}"
        );
        let g = r.groups.as_ref().unwrap();
        let values: Vec<&str> = g.groups.iter().map(|g| g.value.as_str()).collect();
        assert_eq!(values, ["easy", "hard", "(none)"]);
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["groups"]["by"], "level");
        assert_eq!(json["run"]["group_by"], "level");
        assert_eq!(
            json["verdict"]["vs_best_member"]["interval"],
            "newcombe_paired_score"
        );
        let back: Report = serde_json::from_value(json).unwrap();
        assert_eq!(back, r);
        // A report of an earlier version reads back: no verdict, no groups, ties whole.
        let mut old = serde_json::to_value(build(run(), &arms, &items)).unwrap();
        old.as_object_mut().unwrap().remove("verdict");
        old["arms"][0]["vs_panel"]
            .as_object_mut()
            .unwrap()
            .remove("both_right");
        let old: Report = serde_json::from_value(old).unwrap();
        assert!(old.verdict.is_none() && old.groups.is_none());
        assert!(markdown(&old).contains("| 2 / 1 tied / 1 p=1.000 |"));
    }

    #[test]
    fn markdown_formats_small_costs_and_judge() {
        let arms = vec![arm("panel", ArmKind::Panel)];
        let mut it = item("1", "panel", true, Some(0.000_123), 1.0);
        it.judge_cost_usd = Some(0.02);
        let mut info = run();
        info.max_cost_usd = Some(1.0);
        let md = markdown(&build(info, &arms, &[it]));
        assert!(md.contains("| $0.000123 | $0.000123 |"), "{md}");
        assert!(md.contains("of which the judge: $0.0200."), "{md}");
        assert!(md.contains("Budget: $1.0000 (not reached)."), "{md}");
    }
}
