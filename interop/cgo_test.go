//go:build cgo

package interop_test

// cgoEnabled: the SQLite half (mattn/go-sqlite3) can run.
const cgoEnabled = true
