-- `massgen eval` runs (docs/eval.md): one row per run and one per item and arm, so the
-- server lists them (`GET /v1/evals`) and the page shows them. The sessions an item ran
-- are ordinary session records; `session_ids` names them. Kept until deleted by hand: the
-- records' retention (age, count) prunes sessions and stored responses, not eval runs.
CREATE TABLE eval_runs (
    id TEXT PRIMARY KEY,
    -- Caller::owner(), as in `sessions` ("" for the CLI and a server without keys).
    owner TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    updated_ms BIGINT NOT NULL,
    -- running | finished | stopped
    status TEXT NOT NULL,
    -- The data file as given on the command line.
    data TEXT NOT NULL,
    grader TEXT NOT NULL,
    -- JSON array of ArmInfo.
    arms TEXT NOT NULL,
    -- The report, JSON; null while the run is running.
    report TEXT
);

CREATE INDEX eval_runs_by_owner ON eval_runs (owner, created_ms DESC);

CREATE TABLE eval_items (
    run_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    arm TEXT NOT NULL,
    -- 0 or 1: BIGINT reads back as one type through sqlx's Any driver on both engines
    -- (SQLite has no BOOLEAN, and Any does not map PostgreSQL's to an integer).
    correct BIGINT NOT NULL,
    -- Why the arm gave no gradable answer; null when it answered.
    failed TEXT,
    -- Null when a call had no price.
    cost_usd DOUBLE PRECISION,
    latency_ms BIGINT NOT NULL,
    -- JSON array of session ids.
    session_ids TEXT NOT NULL,
    -- The ItemResult, JSON (what the API serves).
    result TEXT NOT NULL,
    PRIMARY KEY (run_id, item_id, arm)
);

CREATE INDEX eval_items_by_run ON eval_items (run_id);
