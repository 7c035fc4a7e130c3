-- agentstore schema version 17 for postgres (prefix "agentstore_").
-- Version 17 gives MariaDB's session queue its live-items index in the
-- form MariaDB can use (no partial indexes there); PostgreSQL's partial
-- index needs no change. The version is recorded so every chain keeps the
-- same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (17, CURRENT_TIMESTAMP);
