-- agentstore schema version 15 for sqlite (prefix "agentstore_").
-- PLACEHOLDER (drop at merge): stands in for the parallel V15 so the chain is contiguous.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (15, CURRENT_TIMESTAMP);
