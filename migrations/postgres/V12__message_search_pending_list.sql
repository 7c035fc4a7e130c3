-- agentstore schema version 12 for postgres (prefix "agentstore_").
-- Released migration: never edit. The search's GIN index gets a pending
-- list of at most 128 kB (gin_pending_list_limit; the server default is
-- 4 MB): an index with fastupdate keeps new entries in an unsorted list
-- every search reads whole, so a rare word's search cost the list's size,
-- not a lookup (measured: 417 pages, 7-8 ms, with 10,000 messages all
-- pending; 0.9 ms once flushed, at 1e4, 1e5 and 1e6 messages alike). The
-- list is flushed into the tree once it passes the limit; appends measured
-- the same either way. The ALTER holds the index's ACCESS EXCLUSIVE lock
-- for an instant (appends wait that long); the list is then flushed.
-- (SQLite: the version only.)
DO $$ DECLARE
  idx regclass
; BEGIN
  SELECT i.indexrelid INTO idx FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  WHERE i.indrelid = to_regclass('"agentstore_messages"') AND c.relname = btrim('"idx_agentstore_messages_search"', '"')
; IF idx IS NOT NULL THEN
    EXECUTE format('ALTER INDEX %s SET (gin_pending_list_limit = 128)', idx)
  ; PERFORM gin_clean_pending_list(idx)
; END IF
; END $$;
INSERT INTO "agentstore_schema_version" (version, applied_at) VALUES (12, CURRENT_TIMESTAMP);
