-- agentstore schema version 6 for postgres (prefix "agentstore_").
-- Released migration: never edit. Keyset paging indexes of ListChildrenPage
-- (parent_id, created_at, id), GetSummariesPage and PlansPage
-- (session_id, created_at, id), replacing the single-column indexes they
-- lead with (the foreign-key cascades use the new ones), and the partial
-- index of finished queue items that PurgeFinished walks by age. Built
-- without blocking writers: CONCURRENTLY, outside a transaction (see the
-- .conf file beside this one).
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_sessions_parent_created" ON "agentstore_sessions" ("parent_id","created_at","id");
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_summaries_session_created" ON "agentstore_summaries" ("session_id","created_at","id");
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_plans_session_created" ON "agentstore_plans" ("session_id","created_at","id");
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_queue_processed_at" ON "agentstore_queue" ("processed_at") WHERE processed_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS "idx_agentstore_sessions_parent_id";
DROP INDEX CONCURRENTLY IF EXISTS "idx_agentstore_summaries_session_id";
DROP INDEX CONCURRENTLY IF EXISTS "idx_agentstore_plans_session_id";
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (6, CURRENT_TIMESTAMP);
