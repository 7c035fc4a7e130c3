-- agentstore schema version 13 for postgres (prefix "agentstore_").
-- The distribution column in every key (docs/distributed.md, row-based
-- Citus layout): Citus distributes a table only when each primary key and
-- unique index contains its distribution column and each foreign key joins
-- co-located tables on it. The session tables are distributed by session
-- id, the provider's by instance id:
-- * compacts, summaries, todos, plans, session_changes: primary key
--   (id, session_id); queue: (seq, session_id) and the item id unique per
--   session, (id, session_id); orchestrator_queue: (id, instance_id).
--   The old key column comes first, so a lookup by it alone keeps its index.
-- * worker_queue: instance_id NOT NULL (items that are not an activity of
--   an instance get '') and primary key (id, instance_id).
-- * sessions: the parent_id -> id foreign key is dropped (a fork lives on
--   another shard than its parent); deleting a session deletes the
--   sessions below it in code, as the cascade did.
-- The key changes rebuild their indexes under an ACCESS EXCLUSIVE lock of
-- each table, in one transaction.
ALTER TABLE "agentstore_sessions" DROP CONSTRAINT IF EXISTS "fk_agentstore_sessions_parent";
DO $$
DECLARE r record
; BEGIN
FOR r IN SELECT c.conrelid::regclass AS t, c.conname FROM pg_constraint c WHERE c.contype = 'p' AND c.conrelid IN (
'"agentstore_compacts"'::regclass, '"agentstore_summaries"'::regclass, '"agentstore_queue"'::regclass,
'"agentstore_todos"'::regclass, '"agentstore_plans"'::regclass, '"agentstore_session_changes"'::regclass,
'"agentstore_orchestrator_queue"'::regclass, '"agentstore_worker_queue"'::regclass)
LOOP
EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.t, r.conname)
; END LOOP
; END
$$;
ALTER TABLE "agentstore_compacts" ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_summaries" ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_queue" ADD PRIMARY KEY ("seq","session_id");
DROP INDEX IF EXISTS "idx_agentstore_queue_id";
CREATE UNIQUE INDEX IF NOT EXISTS "idx_agentstore_queue_item" ON "agentstore_queue" ("id","session_id");
ALTER TABLE "agentstore_todos" ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_plans" ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_session_changes" ADD PRIMARY KEY ("id","session_id");
ALTER TABLE "agentstore_orchestrator_queue" ADD PRIMARY KEY ("id","instance_id");
UPDATE "agentstore_worker_queue" SET "instance_id" = '' WHERE "instance_id" IS NULL;
ALTER TABLE "agentstore_worker_queue" ALTER COLUMN "instance_id" SET NOT NULL;
ALTER TABLE "agentstore_worker_queue" ADD PRIMARY KEY ("id","instance_id");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (13, CURRENT_TIMESTAMP);
