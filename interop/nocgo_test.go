//go:build !cgo

package interop_test

// cgoEnabled: a CGO_ENABLED=0 build has only mattn/go-sqlite3's stub, so
// the SQLite half is skipped.
const cgoEnabled = false
