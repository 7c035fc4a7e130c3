-- agentstore schema version 19 for sqlite (prefix "agentstore_").
-- Released migration: never edit. The session change feed's table in id
-- order (docs/changes.md): SQLite has one writer at a time, so ord is
-- always 0 here and the feed's order (ord, id) is the id's; reads and
-- purges walk the primary key, and the (ord, id) index, which only
-- repeated it, is gone. The id is a plain INTEGER PRIMARY KEY (the rowid)
-- instead of AUTOINCREMENT, which wrote sqlite_sequence on every change:
-- a new id is the largest stored id + 1, and the largest never goes down
-- (nothing deletes the feed's newest row but a purge, whose tombstone
-- keeps the id of the last change it deleted), so no id is reused. Both
-- writes came with every change row: the session queue's Dequeue+Complete
-- ran about a quarter faster without them (BENCHMARKS.md, 2026-12-05).
-- The table is rebuilt (its triggers dropped first and created again as
-- V10 wrote them: renaming a table rewrites the triggers that name it);
-- the rows keep their ids, and if the old sequence was past the largest
-- id (rows deleted by hand), a purge tombstone at the sequence's value
-- keeps later ids beyond it and tells a reader behind it that changes are
-- gone.
DROP TRIGGER IF EXISTS "agentstore_sessions_change_insert";
DROP TRIGGER IF EXISTS "agentstore_sessions_change_update";
DROP TRIGGER IF EXISTS "agentstore_sessions_change_delete";
DROP TRIGGER IF EXISTS "agentstore_queue_change_insert";
DROP TRIGGER IF EXISTS "agentstore_queue_change_status";
ALTER TABLE "agentstore_session_changes" RENAME TO "agentstore_session_changes_v18";
CREATE TABLE "agentstore_session_changes" ("id" integer PRIMARY KEY,"ord" integer NOT NULL DEFAULT 0,"tenant_id" text,"session_id" uuid NOT NULL,"kind" varchar(32) NOT NULL,"item_id" uuid,"state" varchar(32),"from_seq" integer NOT NULL DEFAULT 0,"to_seq" integer NOT NULL DEFAULT 0,"version" integer NOT NULL DEFAULT 0,"at" integer NOT NULL);;
INSERT INTO "agentstore_session_changes" ("id","ord","tenant_id","session_id","kind","item_id","state","from_seq","to_seq","version","at") SELECT "id","ord","tenant_id","session_id","kind","item_id","state","from_seq","to_seq","version","at" FROM "agentstore_session_changes_v18";
INSERT INTO "agentstore_session_changes" ("id","ord","tenant_id","session_id","kind","at") SELECT seq, 0, NULL, '00000000-0000-0000-0000-000000000000', 'feed.purged', CAST((julianday('now') - 2440587.5) * 86400000 AS integer) FROM sqlite_sequence WHERE name LIKE '%!_session!_changes!_v18' ESCAPE '!' AND seq > (SELECT COALESCE(MAX("id"), 0) FROM "agentstore_session_changes_v18");
DROP TABLE "agentstore_session_changes_v18";
CREATE INDEX "idx_agentstore_session_changes_session" ON "agentstore_session_changes"("session_id","ord","id");
CREATE TRIGGER "agentstore_sessions_change_insert" AFTER INSERT ON "agentstore_sessions" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (NEW."tenant_id", NEW."id", 'session.created', NEW."state", 0, NEW."last_seq", NEW."version", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_sessions_change_update" AFTER UPDATE ON "agentstore_sessions" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (NEW."tenant_id", NEW."id", 'session.updated', NEW."state", OLD."last_seq", NEW."last_seq", NEW."version", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_sessions_change_delete" AFTER DELETE ON "agentstore_sessions" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (OLD."tenant_id", OLD."id", 'session.deleted', OLD."state", OLD."last_seq", OLD."last_seq", OLD."version", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_queue_change_insert" AFTER INSERT ON "agentstore_queue" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","item_id","state","at") VALUES ((SELECT s."tenant_id" FROM "agentstore_sessions" s WHERE s."id" = NEW."session_id"), NEW."session_id", 'queue.item', NEW."id", NEW."status", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_queue_change_status" AFTER UPDATE OF "status" ON "agentstore_queue" WHEN OLD."status" IS NOT NEW."status" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","item_id","state","at") VALUES ((SELECT s."tenant_id" FROM "agentstore_sessions" s WHERE s."id" = NEW."session_id"), NEW."session_id", 'queue.item', NEW."id", NEW."status", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (19, CURRENT_TIMESTAMP);
