//go:build cgo

package agentstore_test

import "github.com/agentstore/agentstore"

// testSQLiteDriver is the database/sql driver name of the build's SQLite
// driver, for tests that open a database beside agentstore (mattn/go-sqlite3).
const testSQLiteDriver = "sqlite3"

// buildDDL is the committed chain sql of dialect d as this build applies
// it: as committed.
func buildDDL(_ agentstore.Dialect, sql string) string { return sql }
