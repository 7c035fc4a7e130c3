-- agentstore schema version 9 for sqlite (prefix "agentstore_").
-- Released migration: never edit. The worker queue's plain claim (no
-- session, no tag) walks (visible_at, id) over the plain rows, so a poll
-- reads only visible rows however many are queued for later, tagged or
-- bound to an activity session (issue 24: with 100,000 rows visible only
-- later, the id-order walk of V1's partial id index read all of them on
-- every poll). The new partial index replaces that one.
CREATE INDEX IF NOT EXISTS "idx_agentstore_worker_queue_ready" ON "agentstore_worker_queue"("visible_at","id") WHERE session_id IS NULL AND tag IS NULL;
DROP INDEX IF EXISTS "idx_agentstore_worker_queue_id";
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (9, CURRENT_TIMESTAMP);
