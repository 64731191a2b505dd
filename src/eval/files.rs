//! The run's folder (`--out`): `run.json` (which run, whose, graded how), `items.jsonl`
//! (one graded item and arm a line, appended as each finishes, so a rerun skips them) and
//! the reports written at the end (`report.json`, `report.md`, `chart.svg`).
//!
//! They hold whole questions and answers, so the folder is 0700 and every file 0600 (on
//! unix), whatever the umask or an earlier version left. Nothing in the folder is written
//! through a link someone planted there: the reports are written to a new temporary file
//! (created, never opened if it exists) renamed over the name, which replaces a link
//! rather than following it, and the files a rerun reads must be regular files.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::regular::{self, Links};
use crate::app::evals::{ArmInfo, ItemResult};

pub const RUN_FILE: &str = "run.json";
pub const ITEMS_FILE: &str = "items.jsonl";

/// `run.json` is a few lines; a larger one is not a run's.
pub(super) const MAX_RUN_FILE: u64 = 1024 * 1024;
/// Temporary names tried before a write gives up (each is random: a clash is someone
/// else's file).
const TEMPORARY_TRIES: usize = 8;

/// `run.json`: what a rerun must agree with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFile {
    pub run_id: String,
    /// The owner id the run is filed under (`MASSGEN_EVAL_KEY`'s, "" for none): a rerun
    /// under another continues nothing. Absent from the files of earlier versions (the
    /// records then decide whose the id is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Unix seconds of the first start.
    pub created: u64,
    pub data: String,
    pub grader: String,
    pub arms: Vec<ArmInfo>,
}

/// The folder of a run, opened for writing.
pub struct OutDir {
    dir: PathBuf,
    items: File,
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
    /// Creates `dir` (or opens an earlier run's, or an empty one), makes it private and
    /// reads what an earlier run left there. A last line cut short by a crash is dropped
    /// from the file, so appends start on a fresh line.
    pub fn open(dir: &Path) -> Result<(Self, Previous), String> {
        let shown = dir.display();
        private_folder(dir).map_err(|e| format!("--out {shown}: {e}"))?;
        let run = match regular::read(&dir.join(RUN_FILE), Links::Refuse, MAX_RUN_FILE) {
            Ok(text) => Some(serde_json::from_str::<RunFile>(&text).map_err(|e| {
                format!("--out {shown}: {RUN_FILE} is not a run's file ({e}); use another folder")
            })?),
            Err(e) if e.is_missing() => None,
            Err(e) => return Err(format!("--out {shown}: {RUN_FILE}: {e}")),
        };
        let path = dir.join(ITEMS_FILE);
        let (file, text) =
            open_items(&path).map_err(|e| format!("--out {shown}: {ITEMS_FILE}: {e}"))?;
        let (items, keep) =
            read_items(&text).map_err(|e| format!("--out {shown}: {ITEMS_FILE}: {e}"))?;
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

    /// What `dir` holds, read without writing anything: `--regrade` reads a run before
    /// it checks the grader against its items. Both files must be regular files.
    pub fn read(dir: &Path) -> Result<Previous, String> {
        let shown = dir.display();
        let run = match regular::read(&dir.join(RUN_FILE), Links::Refuse, MAX_RUN_FILE) {
            Ok(text) => Some(
                serde_json::from_str::<RunFile>(&text)
                    .map_err(|e| format!("--out {shown}: {RUN_FILE} is not a run's file ({e})"))?,
            ),
            Err(e) if e.is_missing() => None,
            Err(e) => return Err(format!("--out {shown}: {RUN_FILE}: {e}")),
        };
        let text = match regular::read(&dir.join(ITEMS_FILE), Links::Refuse, u64::MAX) {
            Ok(text) => text,
            Err(e) if e.is_missing() => String::new(),
            Err(e) => return Err(format!("--out {shown}: {ITEMS_FILE}: {e}")),
        };
        let (items, _) =
            read_items(&text).map_err(|e| format!("--out {shown}: {ITEMS_FILE}: {e}"))?;
        Ok(Previous { run, items })
    }

    /// Empties `items.jsonl`: the folder starts a new run, and the lines it held were
    /// another run's.
    pub fn restart(&mut self) -> Result<(), String> {
        self.items
            .set_len(0)
            .map_err(|e| format!("{}: {e}", self.dir.join(ITEMS_FILE).display()))
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

    /// Writes `name` in the folder through a new temporary file renamed over it, so a
    /// reader never sees half and a link at `name` is replaced, not written through.
    pub fn write(&self, name: &str, text: &str) -> Result<(), String> {
        let path = self.dir.join(name);
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        let (temporary, mut file) = self.temporary(name).map_err(fail)?;
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.flush())
            .and_then(|()| std::fs::rename(&temporary, &path));
        if written.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        written.map_err(fail)
    }

    /// A new 0600 file beside `name`: created, so nothing already there (a planted link
    /// included) is opened.
    fn temporary(&self, name: &str) -> std::io::Result<(PathBuf, File)> {
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut last = None;
        for _ in 0..TEMPORARY_TRIES {
            let path = self
                .dir
                .join(format!(".{name}.{:016x}.tmp", rand::random::<u64>()));
            match options.open(&path) {
                Ok(file) => return Ok((path, file)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no temporary name was free")))
    }
}

/// Makes `dir` the run's private folder: created (0700) when missing; one that exists
/// must be empty or an earlier run's (eval takes over no folder that holds other things,
/// nor a shared one such as /tmp), and is made 0700.
fn private_folder(dir: &Path) -> Result<(), String> {
    if std::fs::metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        let mut builder = std::fs::DirBuilder::new();
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        match builder.create(dir) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.to_string()),
            _ => {}
        }
    }
    let meta = std::fs::metadata(dir).map_err(|e| e.to_string())?;
    if !meta.is_dir() {
        return Err("not a folder".to_string());
    }
    #[cfg(unix)]
    let mode = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o7777;
    #[cfg(unix)]
    if mode & 0o1000 != 0 {
        return Err("a shared folder (sticky, as /tmp is): name a new folder inside it".into());
    }
    if !holds_a_run_or_nothing(dir).map_err(|e| e.to_string())? {
        return Err(format!(
            "it holds other files and no run (no {RUN_FILE} or {ITEMS_FILE}): name a new \
             folder, or an earlier run's"
        ));
    }
    #[cfg(unix)]
    if mode != 0o700 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make it private (0700): {e}"))?;
    }
    Ok(())
}

fn holds_a_run_or_nothing(dir: &Path) -> std::io::Result<bool> {
    let exists = |name: &str| std::fs::symlink_metadata(dir.join(name)).is_ok();
    Ok(exists(RUN_FILE) || exists(ITEMS_FILE) || std::fs::read_dir(dir)?.next().is_none())
}

/// `items.jsonl` opened to read and append, with its text: a regular file made 0600, or a
/// new one.
fn open_items(path: &Path) -> Result<(File, String), regular::Error> {
    let mut options = OpenOptions::new();
    options.read(true).append(true);
    match regular::open(path, Links::Refuse, &options) {
        Ok(mut file) => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
            }
            let text = regular::read_to_end(&mut file, u64::MAX)?;
            Ok((file, text))
        }
        Err(e) if e.is_missing() => {
            options.create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            Ok((options.open(path)?, String::new()))
        }
        Err(e) => Err(e),
    }
}

/// The results of `text` and the length of its whole lines. A line that is not a result
/// is an error, except a last line with no newline (an append cut short).
pub(super) fn read_items(text: &str) -> Result<(Vec<ItemResult>, u64), String> {
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
    use crate::app::evals::ArmKind;

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
            ..ItemResult::default()
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
