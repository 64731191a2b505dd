-- `GET /v1/sessions?door=…` (and `exclude_door=…`, read as the other doors) lists an
-- owner's newest sessions of one door: along this index the database reads only the rows
-- it returns, however many sessions the owner's other doors hold (an eval run's thousands
-- among a few served ones).
CREATE INDEX sessions_by_owner_door ON sessions (owner, door, created_ms DESC);
