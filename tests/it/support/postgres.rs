//! A throwaway PostgreSQL server for the tests, from the binaries of Debian's `postgresql`
//! package: initdb in a fresh temporary folder (trust authentication, which initdb's
//! pg_hba.conf grants on the unix socket and loopback only; fsync off: the data is thrown
//! away), listening on 127.0.0.1 at a free port with its unix socket inside that folder, one
//! database `massgen`. PostgreSQL refuses to run as root, so when the tests run as root
//! the server runs as the `postgres` user the package creates (the folder is handed to it).
//!
//! No PostgreSQL binaries: [`PgServer::start`] says why on stderr and returns `None` (the
//! test skips), unless `MASSGEN_REQUIRE_POSTGRES` is set (`.ci/run` sets it), then it
//! panics. Binaries are looked up in `MASSGEN_POSTGRES_BIN` (a folder), then the newest
//! `/usr/lib/postgresql/N/bin`, then `PATH`.
//!
//! The postmaster is this process's own child (its uid is switched in the child rather
//! than through `runuser`, which would stand between them), so it is stopped by its PID:
//! a fast shutdown (SIGINT), bounded, then SIGKILL. [`PgServer::stop`] and
//! [`PgServer::start_again`] take it down and bring it back on the same data and port
//! (a database that goes away while servers use it); dropping the value stops it and
//! removes the folder.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to accept connections after it is started.
const READY_WITHIN: Duration = Duration::from_secs(20);
/// How long a fast shutdown may take before the server is killed.
const STOP_WITHIN: Duration = Duration::from_secs(10);
/// The database [`PgServer::url`] names.
pub const DATABASE: &str = "massgen";

pub struct PgServer {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// The `postgres` user's uid and gid when the tests run as root.
    run_as: Option<(u32, u32)>,
    postmaster: Option<Child>,
}

impl PgServer {
    /// A fresh server with the database `massgen`, accepting connections; `None` (with
    /// the reason on stderr) when PostgreSQL is not installed and not required.
    pub fn start() -> Option<PgServer> {
        let Some(bin) = binaries() else {
            let why = "PostgreSQL's binaries (initdb, postgres, pg_isready, psql) not found: \
                       install Debian's `postgresql` or set MASSGEN_POSTGRES_BIN";
            assert!(
                std::env::var_os("MASSGEN_REQUIRE_POSTGRES").is_none(),
                "MASSGEN_REQUIRE_POSTGRES is set but {why}"
            );
            eprintln!("skipped: {why}");
            return None;
        };
        let run_as = running_as_root().then(postgres_user);
        let dir = tempfile::Builder::new()
            .prefix("massgen-pg-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir(dir.path().join("socket")).expect("socket dir");
        if let Some((uid, gid)) = run_as {
            for path in [dir.path().to_path_buf(), dir.path().join("socket")] {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("chown {}: {e}", path.display()));
            }
        }
        let mut server = PgServer {
            dir,
            bin,
            port: 0,
            run_as,
            postmaster: None,
        };
        let mut initdb = server.command("initdb");
        initdb.arg("-D").arg(server.data()).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "--no-instructions",
            "-E",
            "UTF8",
            "--locale=C",
        ]);
        expect_success(
            super::run_bounded(initdb, Duration::from_secs(60)),
            "initdb",
        );
        // The port is free when asked for but may be taken before the postmaster binds
        // it: a few tries, each on a new port.
        for attempt in 1..=3 {
            server.port = free_port();
            match server.launch() {
                Ok(()) => break,
                Err(log) if attempt < 3 && log.contains("could not bind") => continue,
                Err(log) => panic!("PostgreSQL did not start:\n{log}"),
            }
        }
        let created = server.psql("postgres", &format!("CREATE DATABASE {DATABASE}"));
        expect_success(created, "CREATE DATABASE");
        Some(server)
    }

    /// `postgres://postgres@127.0.0.1:PORT/massgen`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{DATABASE}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The temporary folder (data, socket, log), removed on drop.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The postmaster's PID while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.postmaster.as_ref().map(Child::id)
    }

    /// Runs `sql` with psql in the database `massgen`; the unaligned, tuples-only output.
    pub fn query(&self, sql: &str) -> String {
        let output = self.psql(DATABASE, sql);
        expect_success(output, sql)
    }

    /// Fast shutdown by PID, bounded; the server is killed if it does not stop in time
    /// (and the test fails: a server that does not shut down is a finding).
    pub fn stop(&mut self) {
        let stopped = self.shut_down();
        assert!(
            stopped,
            "PostgreSQL did not stop within {STOP_WITHIN:?}; killed"
        );
    }

    /// Starts the server again on the same data folder and port, after [`Self::stop`].
    pub fn start_again(&mut self) {
        assert!(self.postmaster.is_none(), "PostgreSQL is still running");
        if let Err(log) = self.launch() {
            panic!("PostgreSQL did not start again:\n{log}");
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// One of PostgreSQL's programs, as the `postgres` user when the tests run as root.
    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(program));
        cmd.env("LC_ALL", "C").env_remove("PGDATA");
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid).env("HOME", self.dir.path());
        }
        cmd
    }

    fn psql(&self, database: &str, sql: &str) -> Output {
        let mut cmd = self.command("psql");
        cmd.args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", database])
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-c")
            .arg(sql);
        super::run_bounded(cmd, Duration::from_secs(30))
    }

    /// Starts the postmaster and waits until it accepts connections; on failure the
    /// server is stopped and its log returned.
    fn launch(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("postgres.log");
        if let Some((uid, gid)) = self.run_as {
            let _ = std::os::unix::fs::chown(self.log_path(), Some(uid), Some(gid));
        }
        let mut cmd = self.command("postgres");
        cmd.arg("-D")
            .arg(self.data())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.dir.path().join("socket"))
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log);
        self.postmaster = Some(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("start postgres: {e}")),
        );
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            let exited = self
                .postmaster
                .as_mut()
                .and_then(|child| child.try_wait().ok().flatten());
            if exited.is_some() {
                self.postmaster = None;
                return Err(self.log());
            }
            if self.accepts_connections() {
                return Ok(());
            }
            if Instant::now() > deadline {
                self.shut_down();
                return Err(format!(
                    "not accepting connections within {READY_WITHIN:?}\n{}",
                    self.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn accepts_connections(&self) -> bool {
        let mut cmd = self.command("pg_isready");
        cmd.args(["-q", "-t", "2", "-h", "127.0.0.1", "-U", "postgres"])
            .arg("-p")
            .arg(self.port.to_string());
        super::run_bounded(cmd, Duration::from_secs(10))
            .status
            .success()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// SIGINT (fast shutdown: sessions are disconnected), then SIGKILL after
    /// [`STOP_WITHIN`]. True when the fast shutdown was enough.
    fn shut_down(&mut self) -> bool {
        let Some(mut child) = self.postmaster.take() else {
            return true;
        };
        signal("INT", child.id());
        let deadline = Instant::now() + STOP_WITHIN;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.shut_down();
    }
}

fn signal(name: &str, pid: u32) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stderr(Stdio::null())
        .status();
}

/// The stdout of a finished command; a failure panics with what it printed.
fn expect_success(output: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{what}: {}\n{stdout}{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The folder holding PostgreSQL's server programs, if any.
fn binaries() -> Option<PathBuf> {
    let complete = |dir: &Path| {
        ["initdb", "postgres", "pg_isready", "psql"]
            .iter()
            .all(|program| dir.join(program).is_file())
    };
    if let Some(dir) = std::env::var_os("MASSGEN_POSTGRES_BIN") {
        return Some(PathBuf::from(dir)).filter(|dir| complete(dir));
    }
    // Debian keeps the server programs out of PATH, one folder per major version.
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse().ok()?;
            Some((major, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    let debian = versions.into_iter().rev().map(|(_, dir)| dir);
    let path = std::env::var_os("PATH").unwrap_or_default();
    debian
        .chain(std::env::split_paths(&path))
        .find(|dir| complete(dir))
}

fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The uid and gid of the `postgres` user (Debian's package creates it).
fn postgres_user() -> (u32, u32) {
    let id = |flag: &str| {
        let output = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .expect("run id");
        let text = expect_success(output, "id postgres (PostgreSQL refuses to run as root)");
        text.trim().parse::<u32>().expect("numeric id")
    };
    (id("-u"), id("-g"))
}

/// A loopback port nothing listens on right now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

impl PgServer {
    /// Polls `sql` every `every` until it prints `want`; fails after `within`, showing
    /// what it printed last.
    pub async fn until(&self, sql: &str, want: &str, within: Duration, every: Duration) {
        let deadline = Instant::now() + within;
        while self.query(sql).trim() != want {
            assert!(Instant::now() < deadline, "{sql}: {}", self.query(sql));
            tokio::time::sleep(every).await;
        }
    }
}
