-- agentstore schema version 14 for postgres (prefix "agentstore_").
-- PLACEHOLDER (drop at merge): stands in for the parallel V14 so the chain is contiguous.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (14, CURRENT_TIMESTAMP);
