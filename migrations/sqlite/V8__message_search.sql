-- agentstore schema version 8 for sqlite (prefix "agentstore_").
-- Released migration: never edit. Full-text search over messages
-- (Sessions.Search): an FTS4 table message_fts (unicode61 tokenizer: case
-- and diacritics folded) holding each message's indexed text under a
-- stable docid (message_search maps (session_id, seq) to it), kept in step
-- by triggers on the messages table that run in the statement, and so the
-- transaction, that inserts, updates or deletes a message (cascades
-- included). The indexed text is the content string, the strings of the
-- top-level array and every string member named text or content.
-- FTS4, not FTS5: mattn/go-sqlite3 compiles FTS5 only with a build tag.
-- The last two statements index the messages stored before this step.
CREATE TABLE "agentstore_message_search" ("docid" integer PRIMARY KEY,"session_id" uuid NOT NULL,"seq" integer NOT NULL);
CREATE UNIQUE INDEX "idx_agentstore_message_search_message" ON "agentstore_message_search"("session_id","seq");
CREATE VIRTUAL TABLE "agentstore_message_fts" USING fts4(body, tokenize=unicode61);
CREATE TRIGGER "agentstore_messages_search_insert" AFTER INSERT ON "agentstore_messages" BEGIN INSERT INTO "agentstore_message_search" ("session_id","seq") VALUES (NEW."session_id", NEW."seq"); INSERT INTO "agentstore_message_fts" (docid, body) VALUES ((SELECT "docid" FROM "agentstore_message_search" WHERE "session_id" = NEW."session_id" AND "seq" = NEW."seq"), (SELECT substr(replace(replace(group_concat(atom, char(10)), char(57344), ''), char(57345), ''), 1, 100000) FROM (SELECT atom FROM json_tree(CASE WHEN json_valid(NEW."content") THEN NEW."content" ELSE '[]' END) WHERE type = 'text' AND (path = '$' OR key IN ('text', 'content')) ORDER BY id))); END;
CREATE TRIGGER "agentstore_messages_search_delete" AFTER DELETE ON "agentstore_messages" BEGIN DELETE FROM "agentstore_message_fts" WHERE docid = (SELECT "docid" FROM "agentstore_message_search" WHERE "session_id" = OLD."session_id" AND "seq" = OLD."seq"); DELETE FROM "agentstore_message_search" WHERE "session_id" = OLD."session_id" AND "seq" = OLD."seq"; END;
CREATE TRIGGER "agentstore_messages_search_update" AFTER UPDATE OF "content" ON "agentstore_messages" BEGIN UPDATE "agentstore_message_fts" SET body = (SELECT substr(replace(replace(group_concat(atom, char(10)), char(57344), ''), char(57345), ''), 1, 100000) FROM (SELECT atom FROM json_tree(CASE WHEN json_valid(NEW."content") THEN NEW."content" ELSE '[]' END) WHERE type = 'text' AND (path = '$' OR key IN ('text', 'content')) ORDER BY id)) WHERE docid = (SELECT "docid" FROM "agentstore_message_search" WHERE "session_id" = NEW."session_id" AND "seq" = NEW."seq"); END;
INSERT INTO "agentstore_message_search" ("session_id","seq") SELECT "session_id", "seq" FROM "agentstore_messages" ORDER BY "session_id", "seq";
INSERT INTO "agentstore_message_fts" (docid, body) SELECT r."docid", (SELECT substr(replace(replace(group_concat(atom, char(10)), char(57344), ''), char(57345), ''), 1, 100000) FROM (SELECT atom FROM json_tree(CASE WHEN json_valid(m."content") THEN m."content" ELSE '[]' END) WHERE type = 'text' AND (path = '$' OR key IN ('text', 'content')) ORDER BY id)) FROM "agentstore_message_search" r JOIN "agentstore_messages" m ON m."session_id" = r."session_id" AND m."seq" = r."seq";
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (8, CURRENT_TIMESTAMP);
