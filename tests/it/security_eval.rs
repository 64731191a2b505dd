//! `massgen eval`'s files on the real binary against the simulator: `--out` is a 0700
//! folder of 0600 files where a planted link is replaced or refused, never written
//! through; `--data` and `--schema` are regular files (a FIFO is refused before it is
//! opened).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use crate::eval::{eval, ok, requests, setup};
use crate::support::{bin, offline, run_bounded, write};

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
