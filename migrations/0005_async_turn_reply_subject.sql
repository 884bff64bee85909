-- Detached turns requested over NATS: where to publish the final result.
ALTER TABLE async_turns ADD COLUMN reply_subject TEXT;
