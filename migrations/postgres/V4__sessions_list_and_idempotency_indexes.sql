-- agentstore schema version 4 for postgres (prefix "agentstore_").
-- Released migration: never edit. The (created_at, id) index of List's
-- creation-order walk, and the per-session uniqueness of queue idempotency
-- keys, built without blocking writers: CONCURRENTLY, outside a
-- transaction (see the .conf file beside this one).
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_sessions_created_id" ON "agentstore_sessions" ("created_at","id");
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_queue_session_idem" ON "agentstore_queue" ("session_id","idempotency_key");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (4, CURRENT_TIMESTAMP);
