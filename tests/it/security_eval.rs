//! `massgen eval`'s files on the real binary against the simulator: `--data` and
//! `--schema` are regular files (a FIFO is refused before it is opened).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use crate::eval::{requests, setup};
use crate::support::{bin, offline, run_bounded};

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
