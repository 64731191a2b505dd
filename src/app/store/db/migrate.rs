//! The schema, versioned in the repository and applied at start-up. The SQL is embedded
//! (no migration directory at run time, no database at build time) and shared by SQLite
//! and PostgreSQL.

use std::borrow::Cow;

use sqlx::migrate::{Migration, MigrationType, Migrator};

/// Every migration, oldest first: (version, description, SQL). A new one is appended,
/// never edited in place (sqlx checks the applied ones' checksums).
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "records", include_str!("migrations/0001_records.sql")),
    (2, "spend", include_str!("migrations/0002_spend.sql")),
    (
        3,
        "reservations",
        include_str!("migrations/0003_reservations.sql"),
    ),
    (
        4,
        "responses",
        include_str!("migrations/0004_responses.sql"),
    ),
    (5, "evals", include_str!("migrations/0005_evals.sql")),
    (
        6,
        "response chains",
        include_str!("migrations/0006_response_chains.sql"),
    ),
    (
        7,
        "sessions by door",
        include_str!("migrations/0007_sessions_by_door.sql"),
    ),
];

/// The migrator of the first `count` migrations (all of them with `usize::MAX`), so a test
/// can build the previous schema, fill it, then migrate to the current one.
pub fn migrator(count: usize) -> Migrator {
    let migrations: Vec<Migration> = MIGRATIONS
        .iter()
        .take(count)
        .map(|&(version, description, sql)| {
            Migration::new(
                version,
                Cow::Borrowed(description),
                MigrationType::Simple,
                Cow::Borrowed(sql),
                false,
            )
        })
        .collect();
    Migrator {
        migrations: Cow::Owned(migrations),
        // Replicas starting at once: PostgreSQL takes an advisory lock, SQLite has one
        // process per file.
        locking: true,
        ..Migrator::DEFAULT
    }
}

/// How many migrations this build knows.
pub fn count() -> usize {
    MIGRATIONS.len()
}
