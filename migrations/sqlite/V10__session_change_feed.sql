-- agentstore schema version 10 for sqlite (prefix "agentstore_").
-- Released migration: never edit. The session change feed
-- (SessionChanges, docs/changes.md): one row per committed change of a
-- session (created, updated — which every append, Save, Rewind, summary,
-- todo and plan change is, as each bumps the session's version — deleted)
-- and per state change of a session-queue item, written by triggers in the
-- writing statement, so every write path records its change in its own
-- transaction and no statement is added. SQLite has one writer at a time,
-- so the AUTOINCREMENT id (never reused, even after a purge) is commit
-- order; ord stays 0 (the order is (ord, id) on every dialect). at is the
-- database's clock in Unix milliseconds (retention).
CREATE TABLE "agentstore_session_changes" ("id" integer PRIMARY KEY AUTOINCREMENT,"ord" integer NOT NULL DEFAULT 0,"tenant_id" text,"session_id" uuid NOT NULL,"kind" varchar(32) NOT NULL,"item_id" uuid,"state" varchar(32),"from_seq" integer NOT NULL DEFAULT 0,"to_seq" integer NOT NULL DEFAULT 0,"version" integer NOT NULL DEFAULT 0,"at" integer NOT NULL);
CREATE INDEX "idx_agentstore_session_changes_ord" ON "agentstore_session_changes"("ord","id");
CREATE INDEX "idx_agentstore_session_changes_session" ON "agentstore_session_changes"("session_id","ord","id");
CREATE TRIGGER "agentstore_sessions_change_insert" AFTER INSERT ON "agentstore_sessions" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (NEW."tenant_id", NEW."id", 'session.created', NEW."state", 0, NEW."last_seq", NEW."version", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_sessions_change_update" AFTER UPDATE ON "agentstore_sessions" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (NEW."tenant_id", NEW."id", 'session.updated', NEW."state", OLD."last_seq", NEW."last_seq", NEW."version", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_sessions_change_delete" AFTER DELETE ON "agentstore_sessions" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","state","from_seq","to_seq","version","at") VALUES (OLD."tenant_id", OLD."id", 'session.deleted', OLD."state", OLD."last_seq", OLD."last_seq", OLD."version", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_queue_change_insert" AFTER INSERT ON "agentstore_queue" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","item_id","state","at") VALUES ((SELECT s."tenant_id" FROM "agentstore_sessions" s WHERE s."id" = NEW."session_id"), NEW."session_id", 'queue.item', NEW."id", NEW."status", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
CREATE TRIGGER "agentstore_queue_change_status" AFTER UPDATE OF "status" ON "agentstore_queue" WHEN OLD."status" IS NOT NEW."status" BEGIN INSERT INTO "agentstore_session_changes" ("tenant_id","session_id","kind","item_id","state","at") VALUES ((SELECT s."tenant_id" FROM "agentstore_sessions" s WHERE s."id" = NEW."session_id"), NEW."session_id", 'queue.item', NEW."id", NEW."status", CAST((julianday('now') - 2440587.5) * 86400000 AS integer)); END;
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (10, CURRENT_TIMESTAMP);
