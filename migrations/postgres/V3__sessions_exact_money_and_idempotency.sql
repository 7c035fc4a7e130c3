-- agentstore schema version 3 for postgres (prefix "agentstore_").
-- Released migration: never edit. Session cost keeps every digit (numeric
-- without a scale; numeric(20,9) rounded to 9 places), and session-queue
-- items get the caller's optional idempotency key (EnqueueWith).
ALTER TABLE "agentstore_sessions" ALTER COLUMN "total_cost_usd" TYPE numeric;
ALTER TABLE "agentstore_queue" ADD COLUMN "idempotency_key" text;
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (3, CURRENT_TIMESTAMP);
