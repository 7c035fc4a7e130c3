-- agentstore schema version 14 for mariadb (prefix "agentstore_").
-- The session change feed on MariaDB (docs/changes.md, docs/mariadb.md):
-- V10's triggers as MariaDB spells them — one change row per insert,
-- update and delete of a session and per insert and status change of a
-- session-queue item, with V10's kinds and fields, written in the writing
-- statement (no statement or round trip is added to a write) — and the
-- one-row counter that places changes in the feed.
--
-- Order: (ord, id). An AUTO_INCREMENT id is not commit order (it is taken
-- before its row is visible, and transactions commit in any order), and
-- MariaDB has no transaction id a reader could bound, so the triggers write
-- ord = 0: not in the feed yet. A reader first places the committed rows
-- with ord 0 (the dialect's SequenceChanges): under the counter row's lock
-- it takes them in id order, skipping rows a running transaction holds
-- (FOR UPDATE SKIP LOCKED), and gives them the counter's next value as ord
-- before it reads. The rows with ord > 0 only grow by a suffix of the
-- feed's order, so a consumer resuming after its last (ord, id) never
-- misses a committed change nor sees one twice.
-- at is the database's clock in Unix milliseconds (retention). MariaDB
-- triggers are not fired by foreign-key cascades: a session's queue items
-- deleted with it record nothing (as on the other dialects, where a queue
-- delete is no change either), and sessions below a deleted one are
-- deleted by the engine, each recording its session.deleted.
-- Every statement can run again (the step is no transaction: see the .conf
-- file beside this one). Each trigger is one statement with no ";" inside
-- (the status trigger's WHEN is the INSERT ... SELECT's WHERE), so the file
-- runs as it is in the mysql client and Flyway too.
-- Double-quoted identifiers whatever the server's sql_mode (Migrate's
-- connections have it already; Flyway, goose, golang-migrate and the mysql
-- client get it here).
SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES');
CREATE TABLE IF NOT EXISTS "agentstore_session_change_seq" ("id" int NOT NULL,"ord" bigint NOT NULL,PRIMARY KEY ("id")) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
INSERT INTO "agentstore_session_change_seq" ("id","ord") SELECT 1, COALESCE(MAX(c."ord"), 0) FROM "agentstore_session_changes" c ON DUPLICATE KEY UPDATE "id" = VALUES("id");
DROP TRIGGER IF EXISTS "agentstore_sessions_change_insert";
CREATE TRIGGER "agentstore_sessions_change_insert" AFTER INSERT ON "agentstore_sessions" FOR EACH ROW INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (0, NEW."tenant_id", NEW."id", 'session.created', NEW."state", 0, NEW."last_seq", NEW."version", CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED));
DROP TRIGGER IF EXISTS "agentstore_sessions_change_update";
CREATE TRIGGER "agentstore_sessions_change_update" AFTER UPDATE ON "agentstore_sessions" FOR EACH ROW INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (0, NEW."tenant_id", NEW."id", 'session.updated', NEW."state", OLD."last_seq", NEW."last_seq", NEW."version", CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED));
DROP TRIGGER IF EXISTS "agentstore_sessions_change_delete";
CREATE TRIGGER "agentstore_sessions_change_delete" AFTER DELETE ON "agentstore_sessions" FOR EACH ROW INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (0, OLD."tenant_id", OLD."id", 'session.deleted', OLD."state", OLD."last_seq", OLD."last_seq", OLD."version", CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED));
DROP TRIGGER IF EXISTS "agentstore_queue_change_insert";
CREATE TRIGGER "agentstore_queue_change_insert" AFTER INSERT ON "agentstore_queue" FOR EACH ROW INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","item_id","state","at") VALUES (0, (SELECT s."tenant_id" FROM "agentstore_sessions" s WHERE s."id" = NEW."session_id"), NEW."session_id", 'queue.item', NEW."id", NEW."status", CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED));
DROP TRIGGER IF EXISTS "agentstore_queue_change_status";
CREATE TRIGGER "agentstore_queue_change_status" AFTER UPDATE ON "agentstore_queue" FOR EACH ROW INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","item_id","state","at") SELECT 0, (SELECT s."tenant_id" FROM "agentstore_sessions" s WHERE s."id" = NEW."session_id"), NEW."session_id", 'queue.item', NEW."id", NEW."status", CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) FROM DUAL WHERE NOT (OLD."status" <=> NEW."status");
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (14, CURRENT_TIMESTAMP) ON DUPLICATE KEY UPDATE version = version;
