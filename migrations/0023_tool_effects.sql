-- What calling a tool does to the world, as its manifest declares it, and
-- how its transient failures may be retried.
--
-- `effects`: `read` (changes nothing), `idempotent` (calling it again with
-- the same input changes nothing more) or `side_effect` (anything else).
-- Tools stored before this migration declared nothing, so they are
-- `side_effect`, the default.
--
-- `retry_*`: the fields of the manifest's `retry` as declared; NULL takes
-- the default for the tool's effects when the policy is read.

ALTER TABLE tools
    ADD COLUMN effects TEXT NOT NULL DEFAULT 'side_effect'
        CHECK (effects IN ('read', 'idempotent', 'side_effect')),
    ADD COLUMN retry_max_attempts INTEGER
        CHECK (retry_max_attempts BETWEEN 1 AND 10),
    ADD COLUMN retry_initial_backoff_ms INTEGER
        CHECK (retry_initial_backoff_ms BETWEEN 1 AND 60000),
    ADD COLUMN retry_max_backoff_ms INTEGER
        CHECK (retry_max_backoff_ms BETWEEN 1 AND 300000);
