-- Stored Responses API responses (issue 24): what `GET /v1/responses/{id}` returns,
-- `previous_response_id` continues and `item_reference` names, kept under the API key that
-- created them (every replica on one database sees them) with the retention of session
-- records.
CREATE TABLE responses (
    id TEXT PRIMARY KEY,
    -- Caller::owner(), as in `sessions`.
    owner TEXT NOT NULL,
    created_ms BIGINT NOT NULL,
    -- The conversation so far (system texts and neutral messages, the answer included),
    -- JSON: what `previous_response_id` continues.
    conversation TEXT NOT NULL,
    -- The response object as served, JSON.
    body TEXT NOT NULL
);

-- Retention deletes by age and keeps the newest.
CREATE INDEX responses_by_created ON responses (created_ms);

-- The items a later request may name by id: each stored response's output items and the
-- input items its request sent with an id. A client's own ids repeat (clients send the
-- whole history every turn), so one row per owner and id: the newest response's.
CREATE TABLE response_items (
    owner TEXT NOT NULL,
    id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    -- The neutral item, JSON.
    body TEXT NOT NULL,
    PRIMARY KEY (owner, id)
);

CREATE INDEX response_items_by_response ON response_items (response_id);
