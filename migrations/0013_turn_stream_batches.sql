-- Turn stream chunks in Postgres are kept one row per recorded batch rather
-- than one per chunk: a batch is what one append of one stream wrote, its
-- chunks' JSON texts in order from `first_idx`. A turn is a few batches, so
-- recording it inserts and indexes a few rows instead of one per chunk, and
-- the texts (written by the server) are stored as they are.
--
-- A batch is only ever written together with the update of its live stream
-- row, so it needs no foreign-key check on every append; a trigger removes
-- a stream's batches with the stream (purged, or deleted with its
-- conversation or account).
CREATE TABLE turn_stream_batches (
    stream_id UUID NOT NULL,
    first_idx INTEGER NOT NULL CHECK (first_idx >= 0),
    chunks    TEXT[] NOT NULL CHECK (cardinality(chunks) > 0),
    PRIMARY KEY (stream_id, first_idx)
);

INSERT INTO turn_stream_batches (stream_id, first_idx, chunks)
SELECT stream_id, idx, ARRAY[chunk::text] FROM turn_stream_chunks;

DROP TABLE turn_stream_chunks;

CREATE FUNCTION turn_stream_batches_remove() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM turn_stream_batches WHERE stream_id = OLD.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER turn_streams_remove_batches
    AFTER DELETE ON turn_streams
    FOR EACH ROW EXECUTE FUNCTION turn_stream_batches_remove();

-- Appends update a stream's count in place (no indexed column changes: a
-- stream's life is renewed by its recorder's periodic check, not by each
-- append), so room on the page lets those updates stay heap-only.
ALTER TABLE turn_streams SET (fillfactor = 70);

-- A stream's conversation already belongs to its account (the foreign key to
-- `conversations`, whose own key to `accounts` cascades), so opening a stream
-- need not also check, and lock, the account's row, which every turn of the
-- account would otherwise contend for.
ALTER TABLE turn_streams DROP CONSTRAINT turn_streams_account_id_fkey;
