//go:build cgo

package agentstore_test

// testSQLiteDriver is the database/sql driver name of the build's SQLite
// driver, for tests that open a database beside agentstore (mattn/go-sqlite3).
const testSQLiteDriver = "sqlite3"
