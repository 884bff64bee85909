-- A resume held for a detached turn's next run asks whether the
-- conversation has an unsettled detached turn.
CREATE INDEX async_turns_unsettled_idx ON async_turns (account_id, conversation_id)
    WHERE status IN ('running', 'waiting');
