-- agentstore schema version 5 for postgres (prefix "agentstore_").
-- Released migration: never edit. The orchestration key-value store of the
-- duroxide contract: kv_store (values of completed executions) and kv_delta
-- (the running execution's changes; a NULL value clears the key).
CREATE TABLE "agentstore_kv_store" ("instance_id" text NOT NULL,"key" text NOT NULL,"value" text NOT NULL,"execution_id" bigint NOT NULL,"last_updated_at_ms" bigint NOT NULL DEFAULT 0,PRIMARY KEY ("instance_id","key"));
CREATE TABLE "agentstore_kv_delta" ("instance_id" text NOT NULL,"key" text NOT NULL,"value" text,"last_updated_at_ms" bigint NOT NULL,PRIMARY KEY ("instance_id","key"));
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (5, CURRENT_TIMESTAMP);
