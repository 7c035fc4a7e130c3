-- agentstore schema version 11 for sqlite (prefix "agentstore_").
-- Released migration: never edit. Version 11 changes PostgreSQL's message
-- search function only (its text extraction becomes PL/pgSQL, planned
-- once per connection); SQLite's search triggers need no change. The
-- version is recorded so both chains keep the same versions.
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (11, CURRENT_TIMESTAMP);
