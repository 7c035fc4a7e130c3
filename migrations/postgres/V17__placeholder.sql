-- agentstore schema version 17 for postgres (prefix "agentstore_").
-- Placeholder of the version another branch owns (replaced at merge).
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (17, CURRENT_TIMESTAMP);
