-- agentstore schema version 7 for postgres (prefix "agentstore_").
-- Released migration: never edit. Provider indexes whose cost does not
-- grow with data the operation does not need: the orchestrator queue in
-- fetch order per instance (instance_id, visible_at, id), which lets the
-- candidate query skip a locked instance's backlog, replacing the
-- single-column instance_id index; the roots (created_at, instance_id)
-- for the bulk selection of DeleteInstanceBulk; the children
-- (parent_instance_id, created_at, instance_id), replacing the
-- single-column parent_instance_id index; executions (status, started_at,
-- instance_id) for ListInstancesByStatus(Page), newest started first,
-- replacing V2's single-column status index. Built without blocking writers:
-- CONCURRENTLY, outside a transaction (see the .conf file beside this one).
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_orchestrator_queue_instance_visible" ON "agentstore_orchestrator_queue" ("instance_id","visible_at","id");
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_instances_roots_created" ON "agentstore_instances" ("created_at","instance_id") WHERE parent_instance_id IS NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_instances_parent_created" ON "agentstore_instances" ("parent_instance_id","created_at","instance_id") WHERE parent_instance_id IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS "idx_agentstore_executions_status_started" ON "agentstore_executions" ("status","started_at","instance_id");
DROP INDEX CONCURRENTLY IF EXISTS "idx_agentstore_orchestrator_queue_instance_id";
DROP INDEX CONCURRENTLY IF EXISTS "idx_agentstore_instances_parent_instance_id";
DROP INDEX CONCURRENTLY IF EXISTS "idx_agentstore_executions_status";
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (7, CURRENT_TIMESTAMP);
