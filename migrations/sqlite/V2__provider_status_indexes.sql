-- agentstore schema version 2 for sqlite (prefix "agentstore_").
-- Released migration: never edit. Indexes for the provider's status and
-- completion-time filters (ListInstancesByStatus, DeleteInstanceBulk and
-- PruneExecutionsBulk with CompletedBefore).
CREATE INDEX IF NOT EXISTS "idx_agentstore_executions_completed_at" ON "agentstore_executions"("completed_at");
CREATE INDEX IF NOT EXISTS "idx_agentstore_executions_status" ON "agentstore_executions"("status");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (2, CURRENT_TIMESTAMP);
