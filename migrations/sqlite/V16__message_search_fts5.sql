-- agentstore schema version 16 for sqlite (prefix "agentstore_").
-- The message search index becomes an FTS5 table in every build (a
-- CGO_ENABLED=0 build's already was; the cgo build now compiles FTS5 in,
-- internal/sqlitefts5). FTS4 keeps a term's whole doclist in one leaf and
-- a lookup reads, in every segment, the leaf where the term sorts, so a
-- rare word sorting after a common one read that word's whole doclist
-- (3 MB at 1e6 messages); FTS5 reads one page per segment. The triggers
-- and the FTS table are dropped and made again (same name, column,
-- tokenizer and docid map, rows keyed by rowid; columnsize=0: no token
-- counts per row, which nothing reads, so an append writes one row less),
-- and every message is indexed again in the step's transaction. A database whose index is
-- FTS4 must take this step in a cgo build (CGO_ENABLED=0 has no FTS4).
DROP TRIGGER IF EXISTS "agentstore_messages_search_insert";
DROP TRIGGER IF EXISTS "agentstore_messages_search_delete";
DROP TRIGGER IF EXISTS "agentstore_messages_search_update";
DROP TABLE IF EXISTS "agentstore_message_fts";
CREATE VIRTUAL TABLE "agentstore_message_fts" USING fts5(body, tokenize=unicode61, columnsize=0);
CREATE TRIGGER "agentstore_messages_search_insert" AFTER INSERT ON "agentstore_messages" BEGIN INSERT INTO "agentstore_message_search" ("session_id","seq") VALUES (NEW."session_id", NEW."seq"); INSERT INTO "agentstore_message_fts" (rowid, body) VALUES ((SELECT "docid" FROM "agentstore_message_search" WHERE "session_id" = NEW."session_id" AND "seq" = NEW."seq"), (SELECT substr(replace(replace(group_concat(atom, char(10)), char(57344), ''), char(57345), ''), 1, 100000) FROM (SELECT atom FROM json_tree(CASE WHEN json_valid(NEW."content") THEN NEW."content" ELSE '[]' END) WHERE type = 'text' AND (path = '$' OR key IN ('text', 'content')) ORDER BY id))); END;
CREATE TRIGGER "agentstore_messages_search_delete" AFTER DELETE ON "agentstore_messages" BEGIN DELETE FROM "agentstore_message_fts" WHERE rowid = (SELECT "docid" FROM "agentstore_message_search" WHERE "session_id" = OLD."session_id" AND "seq" = OLD."seq"); DELETE FROM "agentstore_message_search" WHERE "session_id" = OLD."session_id" AND "seq" = OLD."seq"; END;
CREATE TRIGGER "agentstore_messages_search_update" AFTER UPDATE OF "content" ON "agentstore_messages" BEGIN UPDATE "agentstore_message_fts" SET body = (SELECT substr(replace(replace(group_concat(atom, char(10)), char(57344), ''), char(57345), ''), 1, 100000) FROM (SELECT atom FROM json_tree(CASE WHEN json_valid(NEW."content") THEN NEW."content" ELSE '[]' END) WHERE type = 'text' AND (path = '$' OR key IN ('text', 'content')) ORDER BY id)) WHERE rowid = (SELECT "docid" FROM "agentstore_message_search" WHERE "session_id" = NEW."session_id" AND "seq" = NEW."seq"); END;
INSERT INTO "agentstore_message_fts" (rowid, body) SELECT r."docid", (SELECT substr(replace(replace(group_concat(atom, char(10)), char(57344), ''), char(57345), ''), 1, 100000) FROM (SELECT atom FROM json_tree(CASE WHEN json_valid(m."content") THEN m."content" ELSE '[]' END) WHERE type = 'text' AND (path = '$' OR key IN ('text', 'content')) ORDER BY id)) FROM "agentstore_message_search" r JOIN "agentstore_messages" m ON m."session_id" = r."session_id" AND m."seq" = r."seq";
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (16, CURRENT_TIMESTAMP);
