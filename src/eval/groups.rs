//! Accuracy per group (`--group-by KEY`): the items split by the value of `KEY` in their
//! `metadata`, and per group and arm how many ran, how many were right, and the accuracy
//! with its Wilson interval.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::arm_items::{ArmItems, is_correct};
use super::stats::wilson;
use crate::app::evals::{ArmInfo, ItemResult};

/// The group of items whose metadata lacks the key.
pub const NONE: &str = "(none)";
/// Groups a report lists at most (the largest ones): a key with a value per item would
/// otherwise make a table as long as the data.
pub const MAX_GROUPS: usize = 200;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// The key's value, as text (a string as it is, anything else as JSON; `(none)` for
    /// items without the key).
    pub value: String,
    /// One entry per arm, in the run's order.
    pub arms: Vec<GroupArm>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupArm {
    pub name: String,
    pub n: u64,
    pub correct: u64,
    /// `correct / n`; `None` when the arm ran no item of the group.
    pub accuracy: Option<f64>,
    /// Wilson 95% interval of the accuracy.
    pub ci95: [f64; 2],
}

/// The groups, and how many values were left out past [`MAX_GROUPS`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Groups {
    pub by: String,
    pub groups: Vec<Group>,
    /// Values not listed (the smallest groups past [`MAX_GROUPS`]).
    pub left_out: u64,
}

/// The value `key` gives `item`'s group.
fn value_of(item: &ItemResult, key: &str) -> String {
    match item.metadata.get(key) {
        None => NONE.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `arms`' items grouped by `key`: the groups sorted by value (`(none)` last), at most
/// [`MAX_GROUPS`] of them (the largest, by items in any arm).
pub(super) fn groups(key: &str, arms: &[ArmInfo], items: &[ArmItems<'_>]) -> Groups {
    // value -> per arm (n, correct)
    let mut table: HashMap<String, Vec<(u64, u64)>> = HashMap::new();
    for (at, its) in items.iter().enumerate() {
        for it in &its.list {
            let counts = table
                .entry(value_of(it, key))
                .or_insert_with(|| vec![(0, 0); arms.len()]);
            counts[at].0 += 1;
            counts[at].1 += u64::from(is_correct(it));
        }
    }
    let mut all: Vec<(String, Vec<(u64, u64)>)> = table.into_iter().collect();
    let left_out = all.len().saturating_sub(MAX_GROUPS) as u64;
    if left_out > 0 {
        let size = |counts: &[(u64, u64)]| counts.iter().map(|c| c.0).max().unwrap_or(0);
        all.sort_by(|a, b| size(&b.1).cmp(&size(&a.1)).then_with(|| a.0.cmp(&b.0)));
        all.truncate(MAX_GROUPS);
    }
    all.sort_by(|a, b| {
        (a.0 == NONE)
            .cmp(&(b.0 == NONE))
            .then_with(|| a.0.cmp(&b.0))
    });
    let groups = all
        .into_iter()
        .map(|(value, counts)| Group {
            value,
            arms: arms
                .iter()
                .zip(counts)
                .map(|(arm, (n, correct))| {
                    let (lo, hi) = wilson(correct, n);
                    GroupArm {
                        name: arm.name.clone(),
                        n,
                        correct,
                        accuracy: (n > 0).then(|| correct as f64 / n as f64),
                        ci95: [lo, hi],
                    }
                })
                .collect(),
        })
        .collect();
    Groups {
        by: key.to_string(),
        groups,
        left_out,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;
    use crate::app::evals::ArmKind;
    use serde_json::json;

    fn item(id: usize, arm: &str, correct: bool, level: Option<Value>) -> ItemResult {
        ItemResult {
            item: id.to_string(),
            arm: arm.into(),
            kind: ArmKind::Agent,
            correct,
            failed: None,
            answer: None,
            extracted: None,
            samples: vec![],
            cost_usd: None,
            judge_cost_usd: None,
            input_tokens: 0,
            output_tokens: 0,
            latency_s: 1.0,
            session_ids: vec![],
            judge_session_ids: vec![],
            metadata: level
                .map(|v| {
                    let mut m = serde_json::Map::new();
                    m.insert("level".into(), v);
                    m
                })
                .unwrap_or_default(),
            ..ItemResult::default()
        }
    }

    fn arms() -> Vec<ArmInfo> {
        ["team", "agent:a"]
            .iter()
            .map(|n| ArmInfo {
                name: n.to_string(),
                kind: ArmKind::Agent,
                samples: 1,
                models: vec![],
            })
            .collect()
    }

    #[test]
    fn accuracy_per_value_with_none_last() {
        let arms = arms();
        let mut items = Vec::new();
        for i in 0..10 {
            let level = match i % 3 {
                0 => Some(json!("hard")),
                1 => Some(json!(2)),
                _ => None,
            };
            items.push(item(i, "team", i < 6, level.clone()));
            if i != 9 {
                items.push(item(i, "agent:a", i % 2 == 0, level));
            }
        }
        let mut failed = item(3, "team", true, Some(json!("hard")));
        failed.failed = Some("it failed".into());
        // A rerun's newest line counts: item 3 failed on the panel.
        items.push(failed);
        let per: Vec<ArmItems<'_>> = arms
            .iter()
            .map(|a| ArmItems::collect(&a.name, &items))
            .collect();
        let g = groups("level", &arms, &per);
        assert_eq!(g.by, "level");
        assert_eq!(g.left_out, 0);
        let values: Vec<&str> = g.groups.iter().map(|g| g.value.as_str()).collect();
        assert_eq!(values, ["2", "hard", "(none)"]);
        // hard: items 0, 3, 6, 9. team right on 0 (3 failed, 6 and 9 wrong).
        let hard = &g.groups[1].arms;
        assert_eq!((hard[0].n, hard[0].correct), (4, 1));
        assert_eq!(hard[0].accuracy, Some(0.25));
        let (lo, hi) = wilson(1, 4);
        assert_eq!(hard[0].ci95, [lo, hi]);
        // agent:a has no item 9: 0, 3, 6; right on 0 and 6.
        assert_eq!((hard[1].n, hard[1].correct), (3, 2));
        let none = &g.groups[2].arms;
        assert_eq!((none[0].n, none[0].correct), (3, 2));
    }

    #[test]
    fn many_values_keep_the_largest_groups() {
        let arms = arms();
        let mut items = Vec::new();
        for i in 0..(MAX_GROUPS + 5) {
            items.push(item(i, "team", true, Some(json!(format!("v{i:04}")))));
        }
        for i in 0..3 {
            items.push(item(10_000 + i, "team", false, Some(json!("v9999"))));
        }
        let per: Vec<ArmItems<'_>> = arms
            .iter()
            .map(|a| ArmItems::collect(&a.name, &items))
            .collect();
        let g = groups("level", &arms, &per);
        assert_eq!(g.groups.len(), MAX_GROUPS);
        assert_eq!(g.left_out, 6);
        assert!(
            g.groups
                .iter()
                .any(|x| x.value == "v9999" && x.arms[0].n == 3)
        );
        assert_eq!(g.groups[1].arms[1].accuracy, None);
    }
}
