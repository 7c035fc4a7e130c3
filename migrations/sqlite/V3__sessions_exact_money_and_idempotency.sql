-- agentstore schema version 3 for sqlite (prefix "agentstore_").
-- Released migration: never edit. Session-queue items get the caller's
-- optional idempotency key (EnqueueWith). (Session cost is text on SQLite
-- and already exact.)
ALTER TABLE "agentstore_queue" ADD COLUMN "idempotency_key" text;
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (3, CURRENT_TIMESTAMP);
