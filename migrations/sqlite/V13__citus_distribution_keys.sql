-- agentstore schema version 13 for sqlite (prefix "agentstore_").
-- The distribution column in every key (the models of the row-based Citus
-- layout, docs/distributed.md; the PostgreSQL step changes the same keys):
-- * compacts, summaries, todos, plans: primary key (id, session_id), each
--   table rebuilt (renamed, created anew, rows copied, old table dropped;
--   no table references them). queue: the item id unique per session,
--   (id, session_id). The tables whose key is an AUTOINCREMENT rowid
--   (queue, session_changes, orchestrator_queue) keep it: SQLite has no
--   AUTOINCREMENT in a composite key, and the models spell it so on SQLite.
-- * worker_queue: instance_id NOT NULL (items that are not an activity of
--   an instance get ''), the table rebuilt; its AUTOINCREMENT sequence is
--   carried over, so ids are never reused.
-- * sessions: the parent_id -> id foreign key is removed from the table's
--   definition in sqlite_master (writable_schema, the procedure SQLite
--   documents for removing a foreign key: the stored rows and indexes do
--   not change); a rebuild would rename the parent of every session table.
--   Deleting a session deletes the sessions below it in code.
PRAGMA writable_schema = ON;
UPDATE sqlite_master SET sql = replace(sql, ',CONSTRAINT `fk_agentstore_sessions_parent` FOREIGN KEY (`parent_id`) REFERENCES `agentstore_sessions`(`id`) ON DELETE CASCADE)', ')') WHERE type = 'table' AND instr(sql, ',CONSTRAINT `fk_agentstore_sessions_parent` FOREIGN KEY (`parent_id`) ') > 0;
UPDATE sqlite_master SET sql = replace(sql, ',CONSTRAINT "fk_agentstore_sessions_parent" FOREIGN KEY ("parent_id") REFERENCES "agentstore_sessions"("id") ON DELETE CASCADE)', ')') WHERE type = 'table' AND instr(sql, ',CONSTRAINT "fk_agentstore_sessions_parent" FOREIGN KEY ("parent_id") ') > 0;
PRAGMA writable_schema = RESET;
ALTER TABLE "agentstore_compacts" RENAME TO "agentstore_compacts_v11";
CREATE TABLE "agentstore_compacts" ("id" uuid NOT NULL,"session_id" uuid NOT NULL,"trigger" varchar(32) NOT NULL DEFAULT 'manual',"pre_tokens" integer NOT NULL DEFAULT 0,"post_tokens" integer NOT NULL DEFAULT 0,"saved_tokens" integer NOT NULL DEFAULT 0,"summary" text NOT NULL,"original_count" integer NOT NULL DEFAULT 0,"new_count" integer NOT NULL DEFAULT 0,"logical_parent_id" text,"created_at" datetime NOT NULL,PRIMARY KEY ("id","session_id"),CONSTRAINT "fk_agentstore_compacts_session" FOREIGN KEY ("session_id") REFERENCES "agentstore_sessions"("id") ON DELETE CASCADE);
INSERT INTO "agentstore_compacts" ("id","session_id","trigger","pre_tokens","post_tokens","saved_tokens","summary","original_count","new_count","logical_parent_id","created_at") SELECT "id","session_id","trigger","pre_tokens","post_tokens","saved_tokens","summary","original_count","new_count","logical_parent_id","created_at" FROM "agentstore_compacts_v11";
DROP TABLE "agentstore_compacts_v11";
CREATE INDEX "idx_agentstore_compacts_session_id" ON "agentstore_compacts"("session_id");
ALTER TABLE "agentstore_summaries" RENAME TO "agentstore_summaries_v11";
CREATE TABLE "agentstore_summaries" ("id" uuid NOT NULL,"session_id" uuid NOT NULL,"summary" text NOT NULL,"leaf_message_id" text,"created_at" datetime NOT NULL,PRIMARY KEY ("id","session_id"),CONSTRAINT "fk_agentstore_summaries_session" FOREIGN KEY ("session_id") REFERENCES "agentstore_sessions"("id") ON DELETE CASCADE);
INSERT INTO "agentstore_summaries" ("id","session_id","summary","leaf_message_id","created_at") SELECT "id","session_id","summary","leaf_message_id","created_at" FROM "agentstore_summaries_v11";
DROP TABLE "agentstore_summaries_v11";
CREATE INDEX "idx_agentstore_summaries_session_created" ON "agentstore_summaries"("session_id","created_at","id");
ALTER TABLE "agentstore_todos" RENAME TO "agentstore_todos_v11";
CREATE TABLE "agentstore_todos" ("id" uuid NOT NULL,"session_id" uuid NOT NULL,"position" integer NOT NULL DEFAULT 0,"content" text NOT NULL,"active_form" text NOT NULL,"status" varchar(32) NOT NULL DEFAULT 'pending',"plan_id" uuid,"created_at" datetime NOT NULL,"started_at" datetime,"completed_at" datetime,PRIMARY KEY ("id","session_id"),CONSTRAINT "fk_agentstore_todos_session" FOREIGN KEY ("session_id") REFERENCES "agentstore_sessions"("id") ON DELETE CASCADE);
INSERT INTO "agentstore_todos" ("id","session_id","position","content","active_form","status","plan_id","created_at","started_at","completed_at") SELECT "id","session_id","position","content","active_form","status","plan_id","created_at","started_at","completed_at" FROM "agentstore_todos_v11";
DROP TABLE "agentstore_todos_v11";
CREATE INDEX "idx_agentstore_todos_session_id" ON "agentstore_todos"("session_id");
ALTER TABLE "agentstore_plans" RENAME TO "agentstore_plans_v11";
CREATE TABLE "agentstore_plans" ("id" uuid NOT NULL,"session_id" uuid NOT NULL,"name" text,"content" text NOT NULL,"status" varchar(32) NOT NULL DEFAULT 'draft',"error" text,"created_at" datetime NOT NULL,"approved_at" datetime,"started_at" datetime,"completed_at" datetime,PRIMARY KEY ("id","session_id"),CONSTRAINT "fk_agentstore_plans_session" FOREIGN KEY ("session_id") REFERENCES "agentstore_sessions"("id") ON DELETE CASCADE);
INSERT INTO "agentstore_plans" ("id","session_id","name","content","status","error","created_at","approved_at","started_at","completed_at") SELECT "id","session_id","name","content","status","error","created_at","approved_at","started_at","completed_at" FROM "agentstore_plans_v11";
DROP TABLE "agentstore_plans_v11";
CREATE INDEX "idx_agentstore_plans_session_created" ON "agentstore_plans"("session_id","created_at","id");
CREATE UNIQUE INDEX "idx_agentstore_plans_one_active" ON "agentstore_plans"("session_id") WHERE status = 'draft' OR status = 'approved' OR status = 'executing';
ALTER TABLE "agentstore_worker_queue" RENAME TO "agentstore_worker_queue_v11";
CREATE TABLE "agentstore_worker_queue" ("id" integer PRIMARY KEY AUTOINCREMENT,"work_item" text NOT NULL,"visible_at" integer NOT NULL,"lock_token" text,"locked_until" integer,"created_at" integer NOT NULL,"attempt_count" integer NOT NULL DEFAULT 0,"instance_id" text NOT NULL,"execution_id" integer,"activity_id" integer,"session_id" text,"tag" text);
INSERT INTO sqlite_sequence (name, seq) SELECT substr(name, 1, length(name) - 4), seq FROM sqlite_sequence WHERE name LIKE '%!_worker!_queue!_v11' ESCAPE '!';
INSERT INTO "agentstore_worker_queue" ("id","work_item","visible_at","lock_token","locked_until","created_at","attempt_count","instance_id","execution_id","activity_id","session_id","tag") SELECT "id","work_item","visible_at","lock_token","locked_until","created_at","attempt_count",COALESCE("instance_id", '') AS "instance_id","execution_id","activity_id","session_id","tag" FROM "agentstore_worker_queue_v11";
DROP TABLE "agentstore_worker_queue_v11";
CREATE INDEX "idx_agentstore_worker_queue_activity" ON "agentstore_worker_queue"("instance_id","execution_id","activity_id");
CREATE INDEX "idx_agentstore_worker_queue_ready" ON "agentstore_worker_queue"("visible_at","id") WHERE session_id IS NULL AND tag IS NULL;
CREATE INDEX "idx_agentstore_worker_queue_session_id" ON "agentstore_worker_queue"("session_id") WHERE session_id IS NOT NULL;
CREATE INDEX "idx_agentstore_worker_queue_tag" ON "agentstore_worker_queue"("tag") WHERE tag IS NOT NULL;
DROP INDEX IF EXISTS "idx_agentstore_queue_id";
CREATE UNIQUE INDEX "idx_agentstore_queue_item" ON "agentstore_queue"("id","session_id");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (13, CURRENT_TIMESTAMP);
