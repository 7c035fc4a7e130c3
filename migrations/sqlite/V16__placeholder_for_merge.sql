-- agentstore schema version 16 for sqlite (prefix "agentstore_").
-- PLACEHOLDER (drop at merge): stands in for the parallel V16 so the chain is contiguous.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (16, CURRENT_TIMESTAMP);
