//go:build cgo

package agentstore_test

// testSQLiteDriver is the database/sql driver name of the build's SQLite
// driver, for tests that open a database beside agentstore (mattn/go-sqlite3).
const testSQLiteDriver = "sqlite3"

// testSQLiteHasFTS4: the build's SQLite driver has FTS4 (so a test can
// make the search index a cgo build made before schema version 16).
const testSQLiteHasFTS4 = true
