package agentstore_test

import (
	"strings"

	"github.com/agentstore/agentstore"
)

// buildDDL is the committed chain sql of dialect d as the builds apply it:
// on SQLite the search index of V8 is an FTS5 table keyed by rowid in
// every build (V16; docs/sqlite-drivers.md).
func buildDDL(d agentstore.Dialect, sql string) string {
	if d != agentstore.SQLite {
		return sql
	}
	return strings.NewReplacer("USING fts4(", "USING fts5(", "(docid, body)", "(rowid, body)", "WHERE docid = ", "WHERE rowid = ").Replace(sql)
}
