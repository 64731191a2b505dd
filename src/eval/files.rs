//! The run's folder (`--out`): `run.json` (which run, graded how), `items.jsonl` (one
//! graded item and arm a line, appended as each finishes, so a rerun skips them) and the
//! reports written at the end (`report.json`, `report.md`, `chart.svg`).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::item::{ArmInfo, ItemResult};

pub const RUN_FILE: &str = "run.json";
pub const ITEMS_FILE: &str = "items.jsonl";

/// `run.json`: what a rerun must agree with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFile {
    pub run_id: String,
    /// Unix seconds of the first start.
    pub created: u64,
    pub data: String,
    pub grader: String,
    pub arms: Vec<ArmInfo>,
}

/// The folder of a run, opened for writing.
pub struct OutDir {
    dir: PathBuf,
    items: std::fs::File,
}

/// What a folder already held.
pub struct Previous {
    pub run: Option<RunFile>,
    pub items: Vec<ItemResult>,
}

impl Previous {
    /// (item, arm) pairs already graded.
    pub fn done(&self) -> HashSet<(String, String)> {
        self.items
            .iter()
            .map(|r| (r.item.clone(), r.arm.clone()))
            .collect()
    }
}

impl OutDir {
    /// Creates `dir` (or opens it) and reads what an earlier run left there. A last line
    /// cut short by a crash is dropped from the file, so appends start on a fresh line.
    pub fn open(dir: &Path) -> Result<(Self, Previous), String> {
        let shown = dir.display();
        std::fs::create_dir_all(dir).map_err(|e| format!("--out {shown}: {e}"))?;
        let run = match std::fs::read_to_string(dir.join(RUN_FILE)) {
            Ok(text) => Some(serde_json::from_str::<RunFile>(&text).map_err(|e| {
                format!("--out {shown}: {RUN_FILE} is not a run's file ({e}); use another folder")
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("--out {shown}: {RUN_FILE}: {e}")),
        };
        let path = dir.join(ITEMS_FILE);
        let (items, keep) = match std::fs::read_to_string(&path) {
            Ok(text) => {
                read_items(&text).map_err(|e| format!("--out {shown}: {ITEMS_FILE}: {e}"))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), 0),
            Err(e) => return Err(format!("--out {shown}: {ITEMS_FILE}: {e}")),
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| format!("--out {shown}: {ITEMS_FILE}: {e}"))?;
        file.set_len(keep)
            .map_err(|e| format!("--out {shown}: {ITEMS_FILE}: {e}"))?;
        Ok((
            Self {
                dir: dir.to_path_buf(),
                items: file,
            },
            Previous { run, items },
        ))
    }

    pub fn write_run(&self, run: &RunFile) -> Result<(), String> {
        let text = serde_json::to_string_pretty(run).map_err(|e| e.to_string())?;
        self.write(RUN_FILE, &text)
    }

    /// Appends one result, whole, and flushes it: a crash loses at most the item in hand.
    pub fn append(&mut self, result: &ItemResult) -> Result<(), String> {
        let mut line = serde_json::to_string(result).map_err(|e| e.to_string())?;
        line.push('\n');
        self.items
            .write_all(line.as_bytes())
            .and_then(|()| self.items.flush())
            .map_err(|e| format!("{}: {e}", self.dir.join(ITEMS_FILE).display()))
    }

    /// Writes `name` in the folder through a temporary file, so a reader never sees half.
    pub fn write(&self, name: &str, text: &str) -> Result<(), String> {
        let path = self.dir.join(name);
        let temporary = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(&temporary, text)
            .and_then(|()| std::fs::rename(&temporary, &path))
            .map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The results of `text` and the length of its whole lines. A line that is not a result
/// is an error, except a last line with no newline (an append cut short).
fn read_items(text: &str) -> Result<(Vec<ItemResult>, u64), String> {
    let mut items = Vec::new();
    let mut keep = 0usize;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        if !line.ends_with('\n') {
            break;
        }
        if !line.trim().is_empty() {
            let result: ItemResult = serde_json::from_str(line)
                .map_err(|e| format!("line {}: not a graded item ({e})", index + 1))?;
            items.push(result);
        }
        keep += line.len();
    }
    Ok((items, keep as u64))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a panic is the test failure
mod tests {
    use super::*;
    use crate::eval::item::ArmKind;

    fn result(item: &str) -> ItemResult {
        ItemResult {
            item: item.into(),
            arm: "panel".into(),
            kind: ArmKind::Panel,
            correct: true,
            failed: None,
            answer: Some("Answer: 1".into()),
            extracted: Some("1".into()),
            samples: Vec::new(),
            cost_usd: None,
            judge_cost_usd: None,
            input_tokens: 1,
            output_tokens: 2,
            latency_s: 0.5,
            session_ids: vec!["s1".into()],
            judge_session_ids: Vec::new(),
            fingerprint: String::new(),
        }
    }

    #[test]
    fn appended_items_come_back_and_a_torn_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut out, previous) = OutDir::open(dir.path()).unwrap();
            assert!(previous.run.is_none() && previous.items.is_empty());
            out.append(&result("1")).unwrap();
            out.append(&result("2")).unwrap();
        }
        let path = dir.path().join(ITEMS_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"item\": \"3\", \"ar");
        std::fs::write(&path, text).unwrap();
        let (mut out, previous) = OutDir::open(dir.path()).unwrap();
        assert_eq!(previous.items.len(), 2);
        assert!(
            previous
                .done()
                .contains(&("2".to_string(), "panel".to_string()))
        );
        out.append(&result("3")).unwrap();
        drop(out);
        let (_, previous) = OutDir::open(dir.path()).unwrap();
        let items: Vec<&str> = previous.items.iter().map(|r| r.item.as_str()).collect();
        assert_eq!(items, ["1", "2", "3"]);
    }

    #[test]
    fn a_foreign_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ITEMS_FILE), "hello\n").unwrap();
        let error = OutDir::open(dir.path()).err().unwrap();
        assert!(
            error.contains("items.jsonl: line 1: not a graded item"),
            "{error}"
        );
        std::fs::write(dir.path().join(RUN_FILE), "{}").unwrap();
        assert!(OutDir::open(dir.path()).err().unwrap().contains("run.json"));
    }
}
