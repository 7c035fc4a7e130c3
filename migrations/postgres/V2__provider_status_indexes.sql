-- agentstore schema version 2 for postgres (prefix "agentstore_").
-- Released migration: never edit. Indexes for the provider's status and
-- completion-time filters (ListInstancesByStatus, DeleteInstanceBulk and
-- PruneExecutionsBulk with CompletedBefore), built without blocking writers:
-- CONCURRENTLY, outside a transaction (see the .conf file beside this one).
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_executions_completed_at" ON "agentstore_executions" ("completed_at");
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_executions_status" ON "agentstore_executions" ("status");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (2, CURRENT_TIMESTAMP);
