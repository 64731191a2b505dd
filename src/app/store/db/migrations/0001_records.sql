-- Session records (issue 15). One DDL for SQLite and PostgreSQL: BIGINT and TEXT only
-- (JSON is kept as text: both engines read it back through serde, neither queries it).
CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    -- Caller::owner(): a non-secret id of the API key ("" on a server without keys).
    owner TEXT NOT NULL,
    -- The process that runs (or ran) the session: replicas(id).
    replica TEXT NOT NULL,
    -- running | completed | failed | interrupted
    status TEXT NOT NULL,
    door TEXT NOT NULL,
    model TEXT NOT NULL,
    panel TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    started_ms BIGINT,
    ended_ms BIGINT,
    -- The request's side: question (bounded), its size and hash, metadata.
    info TEXT NOT NULL,
    -- The running summary (agents, winner, usage, counts) the session list shows.
    summary TEXT NOT NULL
);

CREATE INDEX sessions_by_owner ON sessions (owner, created_ms DESC);
-- Retention and interrupted marking look at finished / running sessions by age.
CREATE INDEX sessions_by_status ON sessions (status, created_ms);

CREATE TABLE events (
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    at_ms BIGINT NOT NULL,
    -- The SessionEvent as the API serves it.
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE replicas (
    id TEXT PRIMARY KEY,
    started_ms BIGINT NOT NULL,
    heartbeat_ms BIGINT NOT NULL
);
