-- Cost reservations (issue 23, --max-key-cost-usd-per-day under concurrency): each running
-- session of an owner holds its maximum cost here until it ends, so replicas sharing the
-- database never let a key's sessions together pass its day's limit. A reservation is
-- made in a transaction that first locks the owner's `spend` row of the day, so
-- reservations of one owner and day are made one at a time. Those of a replica whose
-- heartbeat stopped (it crashed) are deleted by the next reservation of that owner and day.
CREATE TABLE reservations (
    id TEXT PRIMARY KEY,
    -- Caller::owner(), as in `spend`.
    owner TEXT NOT NULL,
    -- The UTC day, YYYY-MM-DD, as in `spend`.
    day TEXT NOT NULL,
    -- The process whose session holds it: replicas(id).
    replica TEXT NOT NULL,
    usd DOUBLE PRECISION NOT NULL,
    created_ms BIGINT NOT NULL
);

CREATE INDEX reservations_by_owner ON reservations (owner, day);
