-- agentstore schema version 10 for postgres (prefix "agentstore_").
-- Released migration: never edit. The session change feed
-- (SessionChanges, docs/changes.md): one row per committed change of a
-- session (created, updated — which every append, Save, Rewind, summary,
-- todo and plan change is, as each bumps the session's version — deleted)
-- and per state change of a session-queue item, written by AFTER ROW
-- triggers in the writing statement, so every write path (the one-statement
-- append, group commit, Fork, cascades) records its change in its own
-- transaction and no round trip is added.
--
-- Order: (ord, id). A bigserial is not commit-ordered on PostgreSQL, so
-- ord is the writing transaction's id (pg_current_xact_id), raised to the
-- session's newest ord when that is higher: a writer that committed
-- earlier under the session's row lock (or before this statement began)
-- never sorts after a later one. A reader delivers only rows whose ord is
-- below its snapshot's xmin: every transaction that could still add a row
-- below that bound has ended, so a consumer resuming after its last
-- (ord, id) never misses a committed change nor sees one twice.
-- at is the database's clock in Unix milliseconds (retention).
CREATE TABLE IF NOT EXISTS "agentstore_session_changes" ("id" bigserial,"ord" bigint NOT NULL DEFAULT 0,"tenant_id" text,"session_id" uuid NOT NULL,"kind" varchar(32) NOT NULL,"item_id" uuid,"state" varchar(32),"from_seq" bigint NOT NULL DEFAULT 0,"to_seq" bigint NOT NULL DEFAULT 0,"version" bigint NOT NULL DEFAULT 0,"at" bigint NOT NULL,PRIMARY KEY ("id"));
CREATE INDEX IF NOT EXISTS "idx_agentstore_session_changes_ord" ON "agentstore_session_changes" ("ord","id");
CREATE INDEX IF NOT EXISTS "idx_agentstore_session_changes_session" ON "agentstore_session_changes" ("session_id","ord","id");
CREATE OR REPLACE FUNCTION "agentstore_session_change"() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE x bigint := CAST(CAST(pg_current_xact_id() AS text) AS bigint); p bigint; sid uuid; tid text
; BEGIN
  IF TG_OP = 'DELETE' THEN sid := OLD."id"; tid := OLD."tenant_id"
  ; ELSIF TG_ARGV[0] = 'queue' THEN sid := NEW."session_id"; SELECT s."tenant_id" INTO tid FROM "agentstore_sessions" s WHERE s."id" = sid
  ; ELSE sid := NEW."id"; tid := NEW."tenant_id"
  ; END IF
  ; SELECT c."ord" INTO p FROM "agentstore_session_changes" c WHERE c."session_id" = sid ORDER BY c."ord" DESC, c."id" DESC LIMIT 1
  ; IF p IS NULL OR p < x THEN p := x
  ; END IF
  ; IF TG_ARGV[0] = 'queue' THEN
    INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","item_id","state","at")
    VALUES (p, tid, sid, 'queue.item', NEW."id", NEW."status", CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS bigint))
  ; ELSIF TG_OP = 'INSERT' THEN
    INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","state","from_seq","to_seq","version","at")
    VALUES (p, tid, sid, 'session.created', NEW."state", 0, NEW."last_seq", NEW."version", CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS bigint))
  ; ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","state","from_seq","to_seq","version","at")
    VALUES (p, tid, sid, 'session.updated', NEW."state", OLD."last_seq", NEW."last_seq", NEW."version", CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS bigint))
  ; ELSE
    INSERT INTO "agentstore_session_changes" ("ord","tenant_id","session_id","kind","state","from_seq","to_seq","version","at")
    VALUES (p, tid, sid, 'session.deleted', OLD."state", OLD."last_seq", OLD."last_seq", OLD."version", CAST(EXTRACT(EPOCH FROM statement_timestamp()) * 1000 AS bigint))
  ; END IF
  ; RETURN NULL
; END
$$;
DROP TRIGGER IF EXISTS "trg_sessions_change" ON "agentstore_sessions";
CREATE TRIGGER "trg_sessions_change" AFTER INSERT OR UPDATE OR DELETE ON "agentstore_sessions" FOR EACH ROW EXECUTE FUNCTION "agentstore_session_change"('session');
DROP TRIGGER IF EXISTS "trg_queue_change_insert" ON "agentstore_queue";
CREATE TRIGGER "trg_queue_change_insert" AFTER INSERT ON "agentstore_queue" FOR EACH ROW EXECUTE FUNCTION "agentstore_session_change"('queue');
DROP TRIGGER IF EXISTS "trg_queue_change_status" ON "agentstore_queue";
CREATE TRIGGER "trg_queue_change_status" AFTER UPDATE OF "status" ON "agentstore_queue" FOR EACH ROW WHEN (OLD."status" IS DISTINCT FROM NEW."status") EXECUTE FUNCTION "agentstore_session_change"('queue');
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (10, CURRENT_TIMESTAMP);
