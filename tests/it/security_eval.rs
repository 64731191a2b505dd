//! `massgen eval`'s files on the real binary against the simulator: a run id is its
//! owner's (a copied `--out` under another key, or a `run.json` edited to name another
//! run, starts a new run and leaves the first run's rows as they were, on SQLite and on a
//! throwaway PostgreSQL); `--out` is a 0700 folder of 0600 files where a planted link is
//! replaced or refused, never written through; `--data` and `--schema` are regular files
//! (a FIFO is refused before it is opened). The judge prompt's delimiting is a unit test
//! (`eval::grade`).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

use crate::eval::{eval, eval_with, items, ok, report, requests, setup};
use crate::support::postgres::PgServer;
use crate::support::{bin, get, offline, run_bounded, serve_with_keys, write};

const KEY_A: &str = "k-eval-a";
const KEY_B: &str = "k-eval-b";

fn args<'a>(data: &'a Path, config: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--data",
        data.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--baselines",
        "none",
    ];
    args.extend(extra);
    args
}

fn run_id(out: &Path) -> String {
    report(out)["run"]["run_id"].as_str().unwrap().to_string()
}

fn run_file(out: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap()
}

/// Every line's session ids, in file order.
fn sessions(out: &Path) -> Vec<Value> {
    items(out)
        .iter()
        .map(|l| l["session_ids"].clone())
        .collect()
}

/// A copy of a run folder's files, as `cp -r` would make it.
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Run A under one key; a copy of its folder run under another key, then that folder's
/// `run.json` edited to name A's run; then the database read through a server: A's run is
/// as A left it, and each of the other invocations made a run of its own.
async fn a_run_id_is_its_owners(db: &str) {
    let (mock, dir, config, data) = setup(2, false);
    let db_args = ["--records-db", db];
    let run_a = dir.path().join("run-a");
    ok(&eval_with(
        dir.path(),
        &args(&data, &config, &run_a, &db_args),
        &[("MASSGEN_EVAL_KEY", KEY_A)],
    ));
    let id_a = run_id(&run_a);
    let sessions_a = sessions(&run_a);
    assert_eq!(sessions_a.len(), 2);

    // The folder copied and run under another key: a new run, from scratch.
    let run_b = dir.path().join("run-b");
    copy_folder(&run_a, &run_b);
    let calls = requests(&mock).await;
    let output = eval_with(
        dir.path(),
        &args(&data, &config, &run_b, &db_args),
        &[("MASSGEN_EVAL_KEY", KEY_B)],
    );
    ok(&output);
    let id_b = run_id(&run_b);
    assert_ne!(id_b, id_a, "the copy took over A's run id");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("another owner's"), "{stderr}");
    assert_eq!(run_file(&run_b)["run_id"], id_b.as_str());
    assert!(requests(&mock).await > calls, "B reused A's answers");
    let sessions_b = sessions(&run_b);
    assert_eq!(sessions_b.len(), 2, "only B's own lines stay in its folder");
    assert!(sessions_b.iter().all(|s| !sessions_a.contains(s)));

    // B's own folder, its run.json edited to name A's run: the database refuses the id.
    let edited = std::fs::read_to_string(run_b.join("run.json"))
        .unwrap()
        .replace(&id_b, &id_a);
    std::fs::write(run_b.join("run.json"), edited).unwrap();
    let output = eval_with(
        dir.path(),
        &args(&data, &config, &run_b, &db_args),
        &[("MASSGEN_EVAL_KEY", KEY_B)],
    );
    ok(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("another owner's"), "{stderr}");
    let id_c = run_id(&run_b);
    assert!(id_c != id_a && id_c != id_b, "{id_c}");

    // A's own rerun continues A's run: same id, no call.
    let calls = requests(&mock).await;
    ok(&eval_with(
        dir.path(),
        &args(&data, &config, &run_a, &db_args),
        &[("MASSGEN_EVAL_KEY", KEY_A)],
    ));
    assert_eq!(run_id(&run_a), id_a);
    assert_eq!(requests(&mock).await, calls, "a finished run makes no call");

    // run.json names its owner (the key's owner id, never the key).
    let owner = run_file(&run_a)["owner"].as_str().unwrap().to_string();
    assert_eq!(owner.len(), 16, "{owner}");
    assert!(!owner.contains(KEY_A));

    let server = serve_with_keys(
        &[
            std::ffi::OsStr::new("--records-db"),
            std::ffi::OsStr::new(db),
            std::ffi::OsStr::new("--config"),
            config.as_os_str(),
        ],
        &format!("{KEY_A},{KEY_B}"),
    );
    let run: Value = get(&format!("{}/v1/evals/{id_a}", server.url), Some(KEY_A))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "finished", "{run}");
    assert_eq!(run["items_total"], 2, "{run}");
    assert_eq!(run["report"]["run"]["run_id"], id_a.as_str(), "{run}");
    let served: Vec<Value> = run["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["session_ids"].clone())
        .collect();
    for s in &served {
        assert!(sessions_a.contains(s), "A's items were replaced: {run}");
    }
    let listed: Value = get(&format!("{}/v1/evals", server.url), Some(KEY_B))
        .await
        .json()
        .await
        .unwrap();
    let mut ids: Vec<&str> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut wanted = vec![id_b.as_str(), id_c.as_str()];
    wanted.sort_unstable();
    assert_eq!(ids, wanted, "{listed}");
    for id in [&id_b, &id_c] {
        let run: Value = get(&format!("{}/v1/evals/{id}", server.url), Some(KEY_B))
            .await
            .json()
            .await
            .unwrap();
        assert_eq!(run["items_total"], 2, "{run}");
    }
}

#[tokio::test]
async fn a_copied_out_starts_a_new_run_and_leaves_the_first_ones_rows_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("records.db").display());
    a_run_id_is_its_owners(&db).await;
}

#[tokio::test]
async fn a_copied_out_starts_a_new_run_and_leaves_the_first_ones_rows_postgres() {
    let Some(pg) = PgServer::start() else {
        return;
    };
    a_run_id_is_its_owners(&pg.url()).await;
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

const FILES: [&str; 5] = [
    "run.json",
    "items.jsonl",
    "report.json",
    "report.md",
    "chart.svg",
];

fn private(out: &Path) {
    assert_eq!(mode(out), 0o700, "{}", out.display());
    for name in FILES {
        let path = out.join(name);
        assert!(
            std::fs::symlink_metadata(&path).unwrap().is_file(),
            "{name} is not a plain file"
        );
        assert_eq!(mode(&path), 0o600, "{name}");
    }
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn out_is_private_and_a_planted_link_is_never_written_through() {
    let (_mock, dir, config, data) = setup(2, false);
    let out = dir.path().join("run");
    ok(&eval(dir.path(), &args(&data, &config, &out, &[])));
    private(&out);

    // A folder an earlier version (or a umask) left open is made private again.
    chmod(&out, 0o755);
    for name in FILES {
        chmod(&out.join(name), 0o644);
    }
    ok(&eval(dir.path(), &args(&data, &config, &out, &[])));
    private(&out);

    // Links planted where the reports (and their temporary files) are written: replaced.
    let victim = write(dir.path(), "victim.txt", "precious");
    for name in [
        "report.json",
        "chart.svg",
        ".report.md.tmp",
        ".report.json.tmp",
    ] {
        let _ = std::fs::remove_file(out.join(name));
        std::os::unix::fs::symlink(&victim, out.join(name)).unwrap();
    }
    ok(&eval(dir.path(), &args(&data, &config, &out, &[])));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    private(&out);

    // A link where a file is read (run.json, items.jsonl): refused, the target untouched.
    for name in ["items.jsonl", "run.json"] {
        let kept = out.join(format!("{name}.kept"));
        std::fs::rename(out.join(name), &kept).unwrap();
        let target = write(dir.path(), &format!("{name}.target"), "");
        std::os::unix::fs::symlink(&target, out.join(name)).unwrap();
        let output = eval(dir.path(), &args(&data, &config, &out, &[]));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains(name) && stderr.contains("symbolic link"),
            "{name}: {stderr}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "", "{name}");
        std::fs::remove_file(out.join(name)).unwrap();
        std::fs::rename(&kept, out.join(name)).unwrap();
    }

    // A folder that holds other things is not taken over (nor made private); a shared
    // folder (sticky, like /tmp) is refused.
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    write(&notes, "todo.txt", "mine");
    chmod(&notes, 0o755);
    let shared = dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    chmod(&shared, 0o1777);
    for (folder, wanted) in [(&notes, "holds other files"), (&shared, "sticky")] {
        let output = eval(dir.path(), &args(&data, &config, folder, &[]));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(wanted), "{stderr}");
        assert!(!folder.join("items.jsonl").exists());
    }
    assert_eq!(mode(&notes), 0o755);
    assert_eq!(mode(&shared), 0o1777);
}

/// A FIFO with a writer thread that, once a reader opens it, writes `bytes` newlines (more
/// than the data limit) and ends; [`Fifo::finish`] releases a writer still waiting for a
/// reader (its open pairs with ours) and joins it, so no thread outlives the test.
struct Fifo {
    path: PathBuf,
    opened: mpsc::Receiver<()>,
    writer: std::thread::JoinHandle<()>,
}

impl Fifo {
    fn new(dir: &Path, name: &str, bytes: usize) -> Self {
        let path = dir.join(name);
        let made = Command::new("mkfifo").arg(&path).status().unwrap();
        assert!(made.success());
        let (tx, opened) = mpsc::channel();
        let at = path.clone();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let Ok(mut fifo) = std::fs::OpenOptions::new().write(true).open(&at) else {
                return;
            };
            let _ = tx.send(());
            let chunk = vec![b'\n'; 1 << 20];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk.len());
                if fifo.write_all(&chunk[..n]).is_err() {
                    return;
                }
                left -= n;
            }
        });
        Self {
            path,
            opened,
            writer,
        }
    }

    fn finish(self) {
        if self.opened.try_recv().is_err() {
            // The writer still waits in its open: ours pairs with it, then closes, so its
            // first write fails and it ends.
            drop(std::fs::File::open(&self.path).unwrap());
        }
        self.writer.join().unwrap();
    }
}

#[tokio::test]
async fn a_fifo_as_data_or_schema_is_refused_without_reading_it() {
    let (mock, dir, config, data) = setup(1, false);
    let out = dir.path().join("run");
    let over = 65 << 20;
    let cases: [(&str, Vec<&str>); 2] = [
        ("--data", vec![]),
        ("--schema", vec!["--grader", "json-schema"]),
    ];
    for (flag, extra) in cases {
        let fifo = Fifo::new(dir.path(), &format!("{}.fifo", &flag[2..]), over);
        let fifo_path = fifo.path.to_str().unwrap().to_string();
        let mut args = args(&data, &config, &out, &extra);
        if flag == "--data" {
            args[1] = &fifo_path;
        } else {
            args.extend(["--schema", &fifo_path]);
        }
        let mut cmd = Command::new(bin());
        offline(&mut cmd);
        cmd.arg("eval")
            .args(&args)
            .current_dir(dir.path())
            .env("RUST_LOG", "error")
            .env_remove("MASSGEN_SERVER_RECORDS_DB")
            .env_remove("MASSGEN_EVAL_KEY");
        let output = run_bounded(cmd, Duration::from_secs(60));
        fifo.finish();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag}: {stderr}");
        assert!(
            stderr.contains(&format!("{flag} {fifo_path}: a FIFO, not a regular file")),
            "{flag}: {stderr}"
        );
    }
    assert_eq!(requests(&mock).await, 0);
}
