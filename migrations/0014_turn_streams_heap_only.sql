-- Every update of a turn stream's row stays heap-only: appends (the count),
-- its recorder's renewals (`alive_until`), stop requests and its finish
-- (`status`, `finished_at`) change no indexed column and no column of an
-- index's predicate. The purge finds old streams by when they were opened
-- instead: a stream finishes, or stops being renewed, after it opened.
DROP INDEX turn_streams_finished_idx;
DROP INDEX turn_streams_dead_idx;
CREATE INDEX turn_streams_created_idx ON turn_streams (created_at);

-- A stream goes with its conversation through a trigger rather than a
-- foreign key: the key's check locked the conversation's row (and wrote
-- that lock) for every turn's stream. The stream's opener holds the
-- conversation's lease, so the conversation exists when its stream opens.
CREATE FUNCTION conversation_turn_streams_remove() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM turn_streams
    WHERE account_id = OLD.account_id AND conversation_id = OLD.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER conversations_remove_turn_streams
    AFTER DELETE ON conversations
    FOR EACH ROW EXECUTE FUNCTION conversation_turn_streams_remove();

ALTER TABLE turn_streams DROP CONSTRAINT turn_streams_account_id_conversation_id_fkey;
