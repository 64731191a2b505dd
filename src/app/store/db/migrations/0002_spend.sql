-- Spend per owner and UTC day (issue 15, --max-key-cost-usd-per-day): the sum of the
-- owner's sessions' upstream call costs, added in the writer's flush transaction, so every
-- replica on one database sees one key's spend. One row per owner and day.
CREATE TABLE spend (
    -- Caller::owner(): a non-secret id of the API key ("" on a server without keys).
    owner TEXT NOT NULL,
    -- The UTC day, YYYY-MM-DD.
    day TEXT NOT NULL,
    usd DOUBLE PRECISION NOT NULL,
    tokens BIGINT NOT NULL,
    PRIMARY KEY (owner, day)
);
