//! One arm's results as the report reads them: the newest line per item (a rerun
//! appends), and what counts as right. The report, its verdict and its groups share it.

use std::collections::HashMap;

use crate::app::evals::ItemResult;

/// The items of one arm, one per item id: a rerun appends, so the last line counts.
pub(super) struct ArmItems<'a> {
    pub(super) list: Vec<&'a ItemResult>,
    by_id: HashMap<&'a str, usize>,
}

impl<'a> ArmItems<'a> {
    pub(super) fn collect(arm: &str, items: &'a [ItemResult]) -> Self {
        let mut out = Self {
            list: Vec::new(),
            by_id: HashMap::new(),
        };
        for it in items.iter().filter(|it| it.arm == arm) {
            match out.by_id.get(it.item.as_str()) {
                Some(&i) => out.list[i] = it,
                None => {
                    out.by_id.insert(it.item.as_str(), out.list.len());
                    out.list.push(it);
                }
            }
        }
        out
    }

    pub(super) fn get(&self, id: &str) -> Option<&'a ItemResult> {
        self.by_id.get(id).map(|&i| self.list[i])
    }
}

/// Right, counting a failed item as wrong whatever its `correct` says.
pub(super) fn is_correct(it: &ItemResult) -> bool {
    it.correct && it.failed.is_none()
}
