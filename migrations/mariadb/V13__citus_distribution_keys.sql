-- agentstore schema version 13 for mariadb (prefix "agentstore_").
-- The same keys as V13 of the other chains (there for Citus's row-based
-- distribution; here so that every dialect has one schema shape): primary
-- keys (id, session_id) of compacts, summaries, todos, plans and
-- session_changes, (seq, session_id) of queue with its item id unique per
-- session, (id, instance_id) of both provider queues (worker_queue's
-- instance_id NOT NULL, '' for items that are not activities), and no
-- sessions parent_id foreign key (the engine deletes forks below a deleted
-- session). Each statement can run again: a re-run rebuilds a key to the
-- same columns, the index and foreign-key steps have IF [NOT] EXISTS.
-- Double-quoted identifiers whatever the server's sql_mode (Migrate's
-- connections have it already; Flyway, goose, golang-migrate and the mysql
-- client get it here).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
ALTER TABLE "agentstore_sessions" DROP FOREIGN KEY IF EXISTS "fk_agentstore_sessions_parent";
ALTER TABLE "agentstore_compacts" DROP PRIMARY KEY, ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_summaries" DROP PRIMARY KEY, ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_queue" DROP PRIMARY KEY, ADD PRIMARY KEY ("seq","session_id");
CREATE UNIQUE INDEX IF NOT EXISTS "idx_agentstore_queue_item" ON "agentstore_queue" ("id","session_id");
DROP INDEX IF EXISTS "idx_agentstore_queue_id" ON "agentstore_queue";
ALTER TABLE "agentstore_todos" DROP PRIMARY KEY, ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_plans" DROP PRIMARY KEY, ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_session_changes" DROP PRIMARY KEY, ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_orchestrator_queue" DROP PRIMARY KEY, ADD PRIMARY KEY ("id","instance_id");
UPDATE "agentstore_worker_queue" SET "instance_id" = '' WHERE "instance_id" IS NULL;
ALTER TABLE "agentstore_worker_queue" MODIFY "instance_id" varchar(360) NOT NULL, DROP PRIMARY KEY, ADD PRIMARY KEY ("id","instance_id");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (13, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
