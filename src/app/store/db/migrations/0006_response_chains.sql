-- Stored responses as chains (issue 36): a response keeps its own turn (the input of its
-- request and its answer) and the id of the response it continued, instead of a full copy
-- of the conversation, so storage grows with what each turn adds, not with the
-- conversation's length at every turn. Rows from before keep their whole conversation and
-- no parent: they read as the first turn of their chain.
--
-- The table is rebuilt (its rows copied once) so that the small columns come before the
-- texts: SQLite stores a row's columns in order, and reading a column after a large text
-- means walking that text's overflow pages; a chain is walked by ids and sizes alone.
CREATE TABLE responses_chained (
    id TEXT PRIMARY KEY,
    -- Caller::owner(), as in `sessions`.
    owner TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    -- When a conversation last went on through this response (its creation, or a later
    -- turn that continued it or referenced one of its items): retention goes by it, so a
    -- chain in use is never cut at its oldest turns.
    used_ms BIGINT NOT NULL,
    -- The response this one continued (`previous_response_id`).
    parent TEXT,
    -- The text the row's turn brings to a conversation that continues it (system texts
    -- and messages, as the door counts them): summed along a chain before any is read.
    text_bytes BIGINT NOT NULL,
    -- What the row and its items take: counted per owner in `response_owners`.
    bytes BIGINT NOT NULL,
    -- The response object as served, JSON.
    body TEXT NOT NULL,
    -- This response's own turn (system texts and neutral messages, its answer included),
    -- JSON; before this migration, the whole conversation.
    conversation TEXT NOT NULL
);

INSERT INTO responses_chained
    (id, owner, created_ms, used_ms, parent, text_bytes, bytes, body, conversation)
SELECT id, owner, created_ms, created_ms, NULL, OCTET_LENGTH(conversation),
    OCTET_LENGTH(conversation) + OCTET_LENGTH(body) + COALESCE(
        (SELECT SUM(OCTET_LENGTH(i.id) + OCTET_LENGTH(i.body))
         FROM response_items i WHERE i.response_id = responses.id),
        0),
    body, conversation
FROM responses;

DROP TABLE responses;
ALTER TABLE responses_chained RENAME TO responses;

-- Retention deletes the least recently used.
CREATE INDEX responses_by_used ON responses (used_ms);

-- Each owner's stored bytes (the sum of its responses' `bytes`), kept by the writes and
-- deletes that change it: `--max-stored-bytes-per-key` reads one row per request instead
-- of summing a key's responses (10 ms for 50,000 on SQLite).
CREATE TABLE response_owners (
    owner TEXT PRIMARY KEY,
    bytes BIGINT NOT NULL
);

INSERT INTO response_owners (owner, bytes)
SELECT owner, SUM(bytes) FROM responses GROUP BY owner;
