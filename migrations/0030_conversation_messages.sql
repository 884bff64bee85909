-- A conversation's messages as rows, one per message, so a turn writes what
-- it added (and the message it continued) instead of the whole history.
--
-- `conversations.head` names the stored messages: every write of them draws
-- a new value from one sequence, so a process that cached a conversation's
-- messages under a head knows they are current while the head is the same,
-- even across a conversation deleted and created again under the same id.
--
-- No downtime: adding the columns and the table rewrites nothing. A
-- conversation stored before keeps its messages in `messages` (its
-- `message_count` is NULL) and is read from there; its next write moves it
-- whole into rows (and empties `messages`), and each server moves the idle
-- ones in small batches after it starts, until none is left.

CREATE SEQUENCE conversation_heads;

ALTER TABLE conversations ADD COLUMN head BIGINT NOT NULL DEFAULT 0;
ALTER TABLE conversations ALTER COLUMN head SET DEFAULT nextval('conversation_heads');
-- How many message rows the conversation has; NULL: not moved yet.
ALTER TABLE conversations ADD COLUMN message_count INTEGER;
ALTER TABLE conversations ALTER COLUMN message_count SET DEFAULT 0;

CREATE TABLE conversation_messages (
    account_id      TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq             INTEGER NOT NULL CHECK (seq >= 0),
    -- One AI SDK UIMessage, as the server wrote it.
    message         JSON NOT NULL,
    PRIMARY KEY (account_id, conversation_id, seq)
);

-- Rows go with their conversation through a trigger rather than a foreign
-- key, whose check would run for every row a turn writes (as for
-- `turn_streams`, 0014): only a lease holder writes rows, and it holds the
-- conversation's row.
CREATE FUNCTION conversation_messages_remove() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM conversation_messages
    WHERE account_id = OLD.account_id AND conversation_id = OLD.id;
    RETURN NULL;
END;
$$;

CREATE TRIGGER conversations_remove_messages
    AFTER DELETE ON conversations
    FOR EACH ROW EXECUTE FUNCTION conversation_messages_remove();
