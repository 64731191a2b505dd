//! The records database (`--records-db`): SQLite (one process per file) or PostgreSQL
//! (shared by replicas), through one sqlx `Any` pool and one set of queries (placeholders
//! `$N`, which both engines take). Connect, lock the file and migrate at start-up; note
//! how writes go. Each domain of the store (sessions, spend, evals, stored responses)
//! adds its own statements on [`RecordDb`]; the upkeep timer ([`upkeep`]) and the
//! replicas' notifications ([`listen`]) are shared.

pub mod listen;
mod lock;
pub mod migrate;
pub mod sql;
pub mod upkeep;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyPool, ConnectOptions, Executor};

use crate::config::RecordsDb;

/// Connections one process holds (SQLite serialises writers anyway; PostgreSQL gets a few
/// for concurrent reads).
const SQLITE_CONNECTIONS: u32 = 4;
const POSTGRES_CONNECTIONS: u32 = 8;
/// How long a query waits for a connection before it fails (a database that is down
/// must not hold a reader or the writer forever).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

pub struct RecordDb {
    pool: AnyPool,
    /// What every write transaction ([`Self::begin_write`]) takes. SQLite: one connection of
    /// its own. SQLite lets one writer in at a time anyway, and a connection drops its page
    /// cache whenever another one wrote: with the writes spread over the pool, each batch
    /// read its pages back from the file first (20 `pread`s per streamed request at one
    /// connection). PostgreSQL: the same pool.
    writer: AnyPool,
    engine: Engine,
    /// This process, as `sessions.replica` and `replicas.id` name it.
    replica: Arc<str>,
    /// Scheme, host, port and database (never the password), for messages.
    described: String,
    /// The last write succeeded (`/health`, `massgen_records_store_up`).
    up: AtomicBool,
    /// PostgreSQL: the readers woken by other replicas' commits, and the URL the
    /// listening connection uses.
    wakeups: Option<(Arc<listen::Wakeups>, massgen_core::Secret)>,
    /// SQLite opened by [`Self::open`]: this process alone uses the file.
    lock: Option<lock::FileLock>,
}

impl RecordDb {
    /// Connects and brings the schema up to date. The error names what failed, never the
    /// password.
    ///
    /// SQLite: takes the file's lock first (another process on it is an error naming
    /// its PID), then marks `interrupted` what an earlier process left `running`.
    pub async fn open(db: &RecordsDb) -> Result<Self, String> {
        let lock = match db {
            RecordsDb::Sqlite(path) => {
                let path = prepare_sqlite_file(path)
                    .map_err(|e| format!("cannot create the SQLite file {}: {e}", db.describe()))?;
                Some(lock::hold(&path)?)
            }
            _ => None,
        };
        let mut this = Self::connect(db).await?;
        this.lock = lock;
        this.migrate(migrate::count()).await?;
        if this.owns_file() {
            // A failure here (a full disk) must not stop start-up: the upkeep timer
            // tries again on its first tick.
            if let Err(e) = this.mark_interrupted(Duration::ZERO).await {
                tracing::warn!(
                    store = %this.described,
                    "cannot mark sessions left running by an earlier process (retrying): {}",
                    safe_error(&e)
                );
            }
        }
        Ok(this)
    }

    /// Connects without migrating (tests build older schemas with [`Self::migrate`]).
    pub async fn connect(db: &RecordsDb) -> Result<Self, String> {
        sqlx::any::install_default_drivers();
        let described = db.describe();
        let (url, engine, listen_url) = match db {
            RecordsDb::Memory => return Err("the memory store has no database".into()),
            RecordsDb::Unplaced => {
                return Err("no default location for the records file (neither XDG_DATA_HOME nor HOME is set): give sqlite://PATH, postgres://… or memory".into());
            }
            RecordsDb::Sqlite(path) => {
                let path = prepare_sqlite_file(path)
                    .map_err(|e| format!("cannot create the SQLite file {described}: {e}"))?;
                (sqlite_url(&path), Engine::Sqlite, None)
            }
            RecordsDb::Postgres(url) => (
                url.expose().to_string(),
                Engine::Postgres,
                Some(url.clone()),
            ),
        };
        let options: AnyConnectOptions = url
            .parse::<AnyConnectOptions>()
            .map_err(|_| format!("{described}: not a usable database URL"))?
            .disable_statement_logging();
        let pool_of = |connections: u32| {
            AnyPoolOptions::new()
            .max_connections(connections)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // A connection that comes back still inside a transaction (its commit or
            // rollback failed: SQLite may end the transaction itself on a full disk, and
            // sqlx then counts one that is gone, or opens savepoints in one that never
            // ends) is closed, never reused: closing is the rollback that cannot fail,
            // and a reused one would hold the write lock ("database is locked") forever.
            .after_release(|conn, _| {
                Box::pin(async move { Ok(!sqlx::Connection::is_in_transaction(conn)) })
            })
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if engine == Engine::Sqlite {
                        // WAL is kept in the file; these hold per connection. NORMAL: a
                        // power cut may lose the last commits, never corrupt the file.
                        // temp_store stays FILE: a statement journal (the pages a statement
                        // changes, to undo it if it fails inside its transaction) or a sort
                        // spills to a temporary file. Kept in memory (MEMORY), one statement
                        // over many rows holds all of it: an UPDATE of 40,000 sessions,
                        // as marking a dead process's sessions interrupted is, took 19 MB.
                        conn.execute("PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 5000")
                            .await?;
                    } else {
                        // No query holds a connection (and a reader, or the writer) longer
                        // than this, whatever the server or the link does.
                        conn.execute("SET statement_timeout = 30000").await?;
                    }
                    Ok(())
                })
            })
        };
        let connect = |connections: u32| pool_of(connections).connect_with(options.clone());
        let pool = connect(match engine {
            Engine::Sqlite => SQLITE_CONNECTIONS,
            Engine::Postgres => POSTGRES_CONNECTIONS,
        })
        .await
        .map_err(|e| format!("cannot connect to {described}: {}", safe_error(&e)))?;
        if engine == Engine::Sqlite {
            // Readers do not block the writer, nor the writer them.
            pool.execute("PRAGMA journal_mode = WAL")
                .await
                .map_err(|e| format!("{described}: cannot use WAL: {}", safe_error(&e)))?;
        }
        let writer = match engine {
            Engine::Sqlite => connect(1)
                .await
                .map_err(|e| format!("cannot connect to {described}: {}", safe_error(&e)))?,
            Engine::Postgres => pool.clone(),
        };
        Ok(Self {
            pool,
            writer,
            engine,
            replica: uuid::Uuid::now_v7().to_string().into(),
            described,
            up: AtomicBool::new(true),
            wakeups: listen_url.map(|url| (Arc::default(), url)),
            lock: None,
        })
    }

    /// This process holds the SQLite file's lock: no other process writes to it.
    pub fn owns_file(&self) -> bool {
        self.lock.is_some()
    }

    /// Closes the pool's idle connections (new ones open on demand): after failures
    /// that persist, whatever state the driver was left in goes with them.
    pub(in crate::app::store) async fn recycle_idle(&self) {
        let pools: &[&AnyPool] = match self.engine {
            Engine::Sqlite => &[&self.pool, &self.writer],
            Engine::Postgres => &[&self.pool],
        };
        for pool in pools {
            for _ in 0..pool.num_idle() {
                match pool.try_acquire() {
                    Some(conn) => {
                        let _ = tokio::time::timeout(ACQUIRE_TIMEOUT, conn.close()).await;
                    }
                    None => break,
                }
            }
        }
    }

    /// Closes every connection (what follows fails): before another process takes the
    /// file, or to test a database that went away.
    pub async fn close(&self) {
        self.pool.close().await;
        self.writer.close().await;
    }

    /// Applies the first `count` migrations not applied yet.
    pub async fn migrate(&self, count: usize) -> Result<(), String> {
        migrate::migrator(count)
            .run(&self.pool)
            .await
            .map_err(|e| format!("cannot migrate {}: {e}", self.described))
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    pub fn describe(&self) -> &str {
        &self.described
    }

    pub fn replica(&self) -> &str {
        &self.replica
    }

    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Where a write that is one statement goes (a transaction: [`Self::begin_write`]): the
    /// writer's connection, so that no other connection's write drops its page cache.
    pub(in crate::app::store) fn writer(&self) -> &AnyPool {
        &self.writer
    }

    /// A transaction that writes. On SQLite it takes the write lock as it begins (`BEGIN
    /// IMMEDIATE`, waiting out another writer by the busy timeout): a deferred one that
    /// reads first cannot take it later once another connection has committed since its
    /// read (SQLITE_BUSY_SNAPSHOT, "database is locked", which no timeout waits out), as
    /// the session writer's batches did beside `massgen eval`'s item rows.
    pub(in crate::app::store) async fn begin_write(
        &self,
    ) -> Result<sqlx::Transaction<'static, sqlx::Any>, sqlx::Error> {
        match self.engine {
            Engine::Sqlite => self.writer.begin_with("BEGIN IMMEDIATE").await,
            Engine::Postgres => self.writer.begin().await,
        }
    }

    /// PostgreSQL: where readers of sessions running elsewhere subscribe.
    pub fn wakeups(&self) -> Option<&Arc<listen::Wakeups>> {
        self.wakeups.as_ref().map(|(w, _)| w)
    }

    /// PostgreSQL: the task that listens for other replicas' commits (none on SQLite).
    pub fn listener(&self) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let (wakeups, url) = self.wakeups.as_ref()?;
        Some(Arc::clone(wakeups).run(url.expose().to_string()))
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// Notes the outcome of a write: one warning when a run of failures begins, one line
    /// when it ends, the gauge and the failure counter always.
    pub(in crate::app::store) fn note_write(&self, result: &Result<(), sqlx::Error>) {
        let metrics = crate::telemetry::metrics();
        match result {
            Ok(()) => {
                if !self.up.swap(true, Ordering::Relaxed) {
                    tracing::info!(store = %self.described, "the records database works again");
                }
            }
            Err(e) => {
                if let Some(m) = metrics {
                    m.records_write_failures.inc();
                }
                if self.up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        store = %self.described,
                        "cannot write session records, retrying (sessions still run): {}",
                        safe_error(e)
                    );
                }
            }
        }
        if let Some(m) = metrics {
            m.records_store_up.set(i64::from(self.is_up()));
        }
    }
}

/// How long a rollback after a failed batch may take (a cut PostgreSQL link otherwise
/// holds the writer until TCP notices).
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(5);

/// Rolls a failed batch's transaction back now, before the writer's retry: the retry must
/// not find this transaction still holding the write lock. A rollback that fails (SQLite
/// may already have ended the transaction itself) leaves the connection in a transaction,
/// and the pool closes it on release.
pub(in crate::app::store) async fn roll_back(tx: sqlx::Transaction<'static, sqlx::Any>) {
    match tokio::time::timeout(ROLLBACK_TIMEOUT, tx.rollback()).await {
        Ok(Ok(())) => {}
        Ok(Err(r)) => tracing::debug!(
            "rollback after a failed batch failed (the connection is closed): {}",
            safe_error(&r)
        ),
        Err(_) => tracing::debug!("rollback after a failed batch timed out"),
    }
}

/// An sqlx error as we log it: its text, which for a connection error names the
/// problem, not the URL (sqlx never prints the password; this is the one place that
/// would have to change if it did).
pub fn safe_error(e: &sqlx::Error) -> String {
    e.to_string()
}

/// Unix time in milliseconds.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Creates the SQLite file's directory (0700) and the file (0600) when missing, so the
/// records are never readable by other users, whatever the umask. Returns the absolute
/// path.
fn prepare_sqlite_file(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let path = std::path::absolute(path)?;
    if let Some(dir) = path.parent()
        && !dir.exists()
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)?;
    }
    let mut open = std::fs::OpenOptions::new();
    open.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
    open.open(&path)?;
    Ok(path)
}

/// `sqlite://` + the path, percent-encoded where a URL would misread it (`?`, `#`, `%`,
/// spaces, non-ASCII).
fn sqlite_url(path: &Path) -> String {
    let mut url = String::from("sqlite://");
    for byte in path.to_string_lossy().bytes() {
        if byte.is_ascii_alphanumeric() || b"/-_.~".contains(&byte) {
            url.push(char::from(byte));
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url
}

#[cfg(test)]
mod tests;
