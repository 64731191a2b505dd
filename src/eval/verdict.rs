//! The verdict a report opens with: the panel (the first panel arm) against its best
//! member (the agent arm most often right on the items both ran) and against its best
//! self-consistency arm, each as a paired difference with its interval, the exact McNemar
//! test, the cost ratio and, when the difference is not significant, about how many items
//! would settle it; and one sentence a person reads first.

use serde::{Deserialize, Serialize};

use super::arm_items::{ArmItems, is_correct};
use super::stats::PairedTable;
use crate::app::evals::{ArmInfo, ArmKind};

/// The level below which a McNemar p-value counts as significant.
pub const ALPHA: f64 = 0.05;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The panel arm judged (the run's first).
    pub panel: String,
    /// The verdict for a person: against the best member, else the best self-consistency
    /// arm, else why there is nothing to compare.
    pub sentence: String,
    /// Against the agent arm with the best accuracy on the items both ran (the first in
    /// the run's order on a tie); `None` without an agent arm of this panel.
    pub vs_best_member: Option<Versus>,
    /// Against the best self-consistency arm, chosen alike.
    pub vs_best_self_consistency: Option<Versus>,
}

/// The panel against one arm on the items both ran, from the panel's side: a positive
/// difference is the panel ahead.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Versus {
    pub arm: String,
    pub kind: ArmKind,
    /// Items both ran (a failed item counts, as wrong).
    pub pairs: u64,
    /// The panel's accuracy on those items.
    pub panel_accuracy: f64,
    /// The arm's accuracy on those items.
    pub arm_accuracy: f64,
    /// Panel minus arm, in percentage points: the mean of the per-item differences
    /// (panel right minus arm right, each -1, 0 or 1) times 100.
    pub difference_points: f64,
    /// The paired 95% interval of the difference, in points.
    pub ci95_points: [f64; 2],
    /// The interval's method: `newcombe_paired_score` (Newcombe 1998, method 10).
    pub interval: String,
    pub panel_right_arm_wrong: u64,
    pub both_right: u64,
    pub both_wrong: u64,
    pub panel_wrong_arm_right: u64,
    /// Two-sided exact McNemar test of the items only one got right.
    pub p_value: f64,
    /// `p_value < 0.05`.
    pub significant: bool,
    /// What an item cost each on these items; `None` when a call had no price.
    pub panel_cost_per_item_usd: Option<f64>,
    pub arm_cost_per_item_usd: Option<f64>,
    /// The panel's cost per item over the arm's; `None` when either is unknown or the
    /// arm's is 0.
    pub cost_ratio: Option<f64>,
    /// When not significant: about how many items would find a difference this size
    /// significant 8 times out of 10 at the discordance rates seen (Connor 1987); `None`
    /// when significant or when the difference is 0.
    pub items_to_settle: Option<u64>,
    pub sentence: String,
}

/// The verdict on `arms` (each with its items, in the run's order); `None` without a
/// panel arm.
pub(super) fn verdict(arms: &[ArmInfo], items: &[ArmItems<'_>]) -> Option<Verdict> {
    let panel_at = arms.iter().position(|a| a.kind == ArmKind::Panel)?;
    let panel = &arms[panel_at];
    let prefix = member_prefix(arms, &panel.name);
    let best = |kind: ArmKind, role: &str| {
        best_versus(arms, items, panel_at, kind, &prefix).map(|mut v| {
            v.sentence = sentence(&panel.name, role, &v);
            v
        })
    };
    let vs_best_member = best(ArmKind::Agent, "its best member");
    let vs_best_self_consistency = best(ArmKind::SelfConsistency, "its best self-consistency arm");
    let sentence = match (&vs_best_member, &vs_best_self_consistency) {
        (Some(v), _) | (None, Some(v)) => v.sentence.clone(),
        (None, None) => format!(
            "The panel ({}) has no agent or self-consistency arm on the same items to be \
             compared with (--baselines none, or none ran): no verdict.",
            panel.name
        ),
    };
    Some(Verdict {
        panel: panel.name.clone(),
        sentence,
        vs_best_member,
        vs_best_self_consistency,
    })
}

/// What the arms of `panel`'s own agents are named after their `agent:` or `scK:`: with
/// several panels `PANEL/ID`, else `ID` (every agent arm is the panel's).
fn member_prefix(arms: &[ArmInfo], panel: &str) -> Option<String> {
    // Variants are `NAME+variant`; several base panels mean names carry the panel.
    let mut bases = arms
        .iter()
        .filter(|a| a.kind == ArmKind::Panel)
        .map(|a| a.name.split('+').next().unwrap_or(&a.name));
    let first = bases.next()?;
    bases
        .any(|b| b != first)
        .then(|| format!("{}/", panel.split('+').next().unwrap_or(panel)))
}

/// Whether the arm named `name` calls one of the panel's agents (see [`member_prefix`]).
fn is_member(name: &str, prefix: Option<&str>) -> bool {
    let Some(prefix) = prefix else {
        return true;
    };
    let who = name.split_once(':').map_or(name, |(_, who)| who);
    who.starts_with(prefix)
}

fn best_versus(
    arms: &[ArmInfo],
    items: &[ArmItems<'_>],
    panel_at: usize,
    kind: ArmKind,
    prefix: &Option<String>,
) -> Option<Versus> {
    let mut best: Option<Versus> = None;
    for (arm, its) in arms.iter().zip(items) {
        if arm.kind != kind || !is_member(&arm.name, prefix.as_deref()) {
            continue;
        }
        let Some(v) = versus(&items[panel_at], its, arm) else {
            continue;
        };
        // Strictly better: the first in the run's order keeps a tie.
        if best
            .as_ref()
            .is_none_or(|b| v.arm_accuracy > b.arm_accuracy)
        {
            best = Some(v);
        }
    }
    best
}

/// The panel against `arm` on the items both ran; `None` when they share none.
fn versus(panel: &ArmItems<'_>, other: &ArmItems<'_>, arm: &ArmInfo) -> Option<Versus> {
    let mut table = PairedTable::default();
    let (mut panel_cost, mut arm_cost) = (Some(0.0), Some(0.0));
    for it in &panel.list {
        let Some(theirs) = other.get(&it.item) else {
            continue;
        };
        table.add(is_correct(it), is_correct(theirs));
        panel_cost = panel_cost.zip(it.cost_usd).map(|(a, b)| a + b);
        arm_cost = arm_cost.zip(theirs.cost_usd).map(|(a, b)| a + b);
    }
    let pairs = table.pairs();
    if pairs == 0 {
        return None;
    }
    let n = pairs as f64;
    let (lo, hi) = table.ci95();
    let p_value = table.p_value();
    let significant = p_value < ALPHA;
    let panel_cost_per_item_usd = panel_cost.map(|c| c / n);
    let arm_cost_per_item_usd = arm_cost.map(|c| c / n);
    Some(Versus {
        arm: arm.name.clone(),
        kind: arm.kind,
        pairs,
        panel_accuracy: (table.both_right + table.first_only) as f64 / n,
        arm_accuracy: (table.both_right + table.second_only) as f64 / n,
        difference_points: 100.0 * table.difference(),
        ci95_points: [100.0 * lo, 100.0 * hi],
        interval: "newcombe_paired_score".to_string(),
        panel_right_arm_wrong: table.first_only,
        both_right: table.both_right,
        both_wrong: table.both_wrong,
        panel_wrong_arm_right: table.second_only,
        p_value,
        significant,
        panel_cost_per_item_usd,
        arm_cost_per_item_usd,
        cost_ratio: panel_cost_per_item_usd
            .zip(arm_cost_per_item_usd)
            .filter(|(_, a)| *a > 0.0)
            .map(|(p, a)| p / a),
        items_to_settle: if significant {
            None
        } else {
            table.items_to_settle()
        },
        sentence: String::new(),
    })
}

/// A share as a percentage with one decimal.
pub(super) fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// Points with their sign (a true minus sign), one decimal; 0 without one.
pub fn points(x: f64) -> String {
    let s = format!("{:.1}", x.abs());
    if s == "0.0" {
        s
    } else if x < 0.0 {
        format!("\u{2212}{s}")
    } else {
        format!("+{s}")
    }
}

/// A p-value as a person reads it: two decimals, three below 0.01.
pub fn p_text(p: f64) -> String {
    if p < 0.001 {
        "< 0.001".to_string()
    } else if p < 0.01 {
        format!("= {p:.3}")
    } else {
        format!("= {p:.2}")
    }
}

/// A count rounded to two significant digits from 100 on ("about 180").
fn about(n: u64) -> u64 {
    let mut scale = 1;
    while n / scale >= 100 {
        scale *= 10;
    }
    // Round half up at the kept digits.
    ((n + scale / 2) / scale) * scale
}

/// "at 4.3× the cost per item", or why there is no ratio.
fn cost_words(v: &Versus) -> String {
    match (v.panel_cost_per_item_usd, v.arm_cost_per_item_usd) {
        (Some(_), Some(_)) if v.cost_ratio.is_some() => {
            format!(
                "at {:.1}\u{d7} the cost per item",
                v.cost_ratio.unwrap_or_default()
            )
        }
        (Some(p), Some(_)) if p > 0.0 => format!("at ${p:.6} per item against $0"),
        (Some(_), Some(_)) => "both at no cost".to_string(),
        _ => "cost unknown (a model has no price)".to_string(),
    }
}

/// The comparison in one sentence, from the panel's side.
fn sentence(panel: &str, role: &str, v: &Versus) -> String {
    let who = format!("{role} ({}, {})", v.arm, pct(v.arm_accuracy));
    let numbers = format!(
        "{} vs {}, {} points [{}, {}], McNemar p {}, {}",
        pct(v.panel_accuracy),
        pct(v.arm_accuracy),
        points(v.difference_points),
        points(v.ci95_points[0]),
        points(v.ci95_points[1]),
        p_text(v.p_value),
        cost_words(v)
    );
    let discordant = v.panel_right_arm_wrong + v.panel_wrong_arm_right;
    if discordant == 0 {
        return format!(
            "The panel ({panel}) does not beat {who}: both are right on exactly the same \
             {} of {} items, so {numbers}.",
            v.both_right, v.pairs
        );
    }
    if v.significant {
        let verb = if v.difference_points > 0.0 {
            "beats"
        } else {
            "is worse than"
        };
        return format!("The panel ({panel}) {verb} {who}: {numbers}.");
    }
    let settle = match v.items_to_settle {
        Some(n) => format!(
            "about {} items would settle a difference this size",
            about(n)
        ),
        None => format!(
            "each is right where the other is wrong on {} items, so no number of items \
             would settle a difference of 0",
            v.panel_right_arm_wrong
        ),
    };
    format!("The panel ({panel}) does not beat {who}: {numbers}; {settle}.")
}

/// Wins, ties and losses from the panel's side, spelled out.
pub fn spelled(
    panel_only: u64,
    both_right: u64,
    both_wrong: u64,
    other_only: u64,
    other: &str,
) -> String {
    format!(
        "panel right, {other} wrong: {panel_only}; both right: {both_right}; both wrong: \
         {both_wrong}; panel wrong, {other} right: {other_only}"
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;
    use crate::app::evals::ItemResult;

    fn arm(name: &str, kind: ArmKind) -> ArmInfo {
        ArmInfo {
            name: name.into(),
            kind,
            samples: 1,
            models: vec![],
        }
    }

    fn item(id: usize, arm: &str, correct: bool, cost: Option<f64>) -> ItemResult {
        ItemResult {
            item: id.to_string(),
            arm: arm.into(),
            kind: ArmKind::Agent,
            correct,
            failed: None,
            answer: None,
            extracted: None,
            samples: vec![],
            cost_usd: cost,
            judge_cost_usd: None,
            input_tokens: 0,
            output_tokens: 0,
            latency_s: 1.0,
            session_ids: vec![],
            judge_session_ids: vec![],
            fingerprint: String::new(),
            ..ItemResult::default()
        }
    }

    /// Items 0..n with the outcomes each arm had: `right(arm, i)`.
    fn run(
        arms: &[ArmInfo],
        n: usize,
        right: impl Fn(&str, usize) -> bool,
        cost: impl Fn(&str) -> Option<f64>,
    ) -> Vec<ItemResult> {
        arms.iter()
            .flat_map(|a| {
                (0..n)
                    .map(|i| item(i, &a.name, right(&a.name, i), cost(&a.name)))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    fn judged(arms: &[ArmInfo], items: &[ItemResult]) -> Option<Verdict> {
        let per: Vec<ArmItems<'_>> = arms
            .iter()
            .map(|a| ArmItems::collect(&a.name, items))
            .collect();
        verdict(arms, &per)
    }

    #[test]
    fn the_best_member_on_the_same_items_and_the_sentence() {
        let arms = [
            arm("team", ArmKind::Panel),
            arm("agent:a", ArmKind::Agent),
            arm("sc3:a", ArmKind::SelfConsistency),
            arm("agent:b", ArmKind::Agent),
        ];
        // 60 items. Panel right on 0..41; agent:b right on 0..37 and 41..51 (4 only the
        // panel, 10 only b); agent:a right on 0..30; sc3:a the same as the panel.
        let items = run(
            &arms,
            60,
            |arm, i| match arm {
                "team" | "sc3:a" => i < 41,
                "agent:b" => i < 37 || (41..51).contains(&i),
                _ => i < 30,
            },
            |arm| Some(if arm == "team" { 0.043 } else { 0.01 }),
        );
        let v = judged(&arms, &items).unwrap();
        assert_eq!(v.panel, "team");
        let m = v.vs_best_member.as_ref().unwrap();
        assert_eq!(m.arm, "agent:b");
        assert_eq!(
            (
                m.panel_right_arm_wrong,
                m.both_right,
                m.both_wrong,
                m.panel_wrong_arm_right
            ),
            (4, 37, 9, 10)
        );
        assert!((m.difference_points + 10.0).abs() < 1e-9);
        let (lo, hi) = PairedTable {
            both_right: 37,
            first_only: 4,
            second_only: 10,
            both_wrong: 9,
        }
        .ci95();
        assert_eq!(m.ci95_points, [100.0 * lo, 100.0 * hi]);
        assert!(!m.significant);
        assert_eq!(m.items_to_settle, Some(181));
        assert!((m.cost_ratio.unwrap() - 4.3).abs() < 1e-9);
        assert_eq!(
            v.sentence,
            "The panel (team) does not beat its best member (agent:b, 78.3%): 68.3% vs \
             78.3%, \u{2212}10.0 points [\u{2212}21.8, +2.0], McNemar p = 0.18, at 4.3\u{d7} \
             the cost per item; about 180 items would settle a difference this size."
        );
        let sc = v.vs_best_self_consistency.as_ref().unwrap();
        assert_eq!(
            (sc.arm.as_str(), sc.both_right, sc.both_wrong),
            ("sc3:a", 41, 19)
        );
        assert!(
            sc.sentence
                .contains("both are right on exactly the same 41 of 60 items"),
            "{}",
            sc.sentence
        );
        assert_eq!(sc.items_to_settle, None);
    }

    #[test]
    fn ties_significance_costs_and_no_baseline() {
        let arms = [
            arm("team", ArmKind::Panel),
            arm("agent:a", ArmKind::Agent),
            arm("agent:b", ArmKind::Agent),
        ];
        // a and b equally good: the first is named. The panel is right on every item.
        let items = run(
            &arms,
            40,
            |arm, i| arm == "team" || i < 20,
            |arm| (arm != "agent:b").then_some(0.0),
        );
        let v = judged(&arms, &items).unwrap();
        let m = v.vs_best_member.unwrap();
        assert_eq!(m.arm, "agent:a");
        assert!(m.significant && m.items_to_settle.is_none());
        assert!(v.sentence.starts_with("The panel (team) beats its best member (agent:a, 50.0%): 100.0% vs 50.0%, +50.0 points ["), "{}", v.sentence);
        assert!(
            v.sentence.contains("McNemar p < 0.001, both at no cost."),
            "{}",
            v.sentence
        );
        assert!(v.vs_best_self_consistency.is_none());

        // Unpriced: cost unknown. Worse and significant.
        let items = run(&arms, 40, |arm, i| arm != "team" || i < 20, |_| None);
        let v = judged(&arms, &items).unwrap();
        assert!(
            v.sentence.contains("is worse than its best member"),
            "{}",
            v.sentence
        );
        assert!(v.sentence.contains("cost unknown"), "{}", v.sentence);

        // As many items each way: no number of items settles a difference of 0.
        let items = run(
            &arms[..2],
            10,
            |arm, i| {
                if arm == "team" {
                    i < 3
                } else {
                    (3..6).contains(&i)
                }
            },
            |_| Some(1.0),
        );
        let v = judged(&arms[..2], &items).unwrap();
        assert!(
            v.sentence.contains("0.0 points") && v.sentence.contains("no number of items"),
            "{}",
            v.sentence
        );

        let v = judged(&arms[..1], &items).unwrap();
        assert!(
            v.vs_best_member.is_none() && v.sentence.contains("no verdict"),
            "{}",
            v.sentence
        );
        assert!(
            judged(&arms[1..], &items).is_none(),
            "no panel arm, no verdict"
        );
    }

    #[test]
    fn with_several_panels_only_the_first_panels_agents_are_members() {
        let arms = [
            arm("one", ArmKind::Panel),
            arm("one+majority", ArmKind::Panel),
            arm("two", ArmKind::Panel),
            arm("agent:one/a", ArmKind::Agent),
            arm("agent:two/a", ArmKind::Agent),
        ];
        let items = run(&arms, 10, |arm, _| arm == "agent:two/a", |_| Some(1.0));
        let v = judged(&arms, &items).unwrap();
        assert_eq!(v.vs_best_member.unwrap().arm, "agent:one/a");
        // One panel and its variant: every agent arm is its member.
        assert_eq!(member_prefix(&arms[..2], "one"), None);
    }

    #[test]
    fn numbers_as_a_person_reads_them() {
        assert_eq!(points(-10.0), "\u{2212}10.0");
        assert_eq!(points(1.44), "+1.4");
        assert_eq!(points(-0.04), "0.0");
        assert_eq!(p_text(0.1134), "= 0.11");
        assert_eq!(p_text(0.0042), "= 0.004");
        assert_eq!(p_text(0.0004), "< 0.001");
        assert_eq!(about(181), 180);
        assert_eq!(about(57), 57);
        assert_eq!(about(1250), 1300);
        assert_eq!(about(99), 99);
        assert_eq!(
            spelled(12, 30, 5, 3, "agent:a"),
            "panel right, agent:a wrong: 12; both right: 30; both wrong: 5; panel wrong, agent:a right: 3"
        );
    }
}
