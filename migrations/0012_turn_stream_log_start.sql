-- Turn streams whose chunks are kept in NATS JetStream rather than in
-- `turn_stream_chunks`: the stream sequence of the turn's "open" message on
-- its conversation's subject, where a reader starts. NULL for a stream
-- whose chunks are in Postgres. The row keeps everything else (liveness,
-- stop requests, which stream is the conversation's latest).
ALTER TABLE turn_streams ADD COLUMN log_start BIGINT CHECK (log_start > 0);
