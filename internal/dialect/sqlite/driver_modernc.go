//go:build !cgo

package sqlite

import (
	"database/sql/driver"
	"errors"
	"strconv"

	"modernc.org/sqlite"
)

// The SQLite driver of a CGO_ENABLED=0 build: modernc.org/sqlite, SQLite
// translated to Go (chosen over github.com/ncruces/go-sqlite3 by
// measurement: see docs/sqlite-drivers.md). It is compiled without
// FTS3/FTS4 but with FTS5, the search index's module (V8's statements are
// rewritten for it, see RewriteMigration). The cgo build uses mattn/go-sqlite3
// (driver_mattn.go). Everything else of the dialect is shared by both.

// liteDriverName names the driver (docs, errors, logs).
const liteDriverName = "modernc.org/sqlite"

// liteDriver returns the driver.
func liteDriver() driver.Driver { return &sqlite.Driver{} }

// liteDriverDSN builds the driver's DSN for path ("file:" URI, or
// ":memory:") with the busy timeout in ms, WAL (MEMORY for :memory:),
// foreign keys, BEGIN IMMEDIATE and the synchronous mode; readOnly opens
// the file with mode=ro, no journal-mode switch and no BEGIN IMMEDIATE.
func liteDriverDSN(path string, busyMS int64, sync string, readOnly bool) string {
	busy := "_pragma=busy_timeout(" + strconv.FormatInt(busyMS, 10) + ")"
	params := busy + "&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)&_txlock=immediate&_pragma=synchronous(" + sync + ")"
	if path == ":memory:" {
		return "file::memory:?" + busy + "&_pragma=journal_mode(MEMORY)&_pragma=foreign_keys(1)&_txlock=immediate&_pragma=synchronous(" + sync + ")"
	}
	if readOnly {
		params = "mode=ro&" + busy + "&_pragma=foreign_keys(1)"
	}
	return "file:" + escapeLitePath(path) + "?" + params
}

// liteConnStmtCache is the number of compiled statements liteTimeoutConn
// keeps per connection: the driver compiles every statement anew.
const liteConnStmtCache = sqliteStmtCache

// liteMemoryDSN is an in-memory database of its own (Offline).
const liteMemoryDSN = "file::memory:"

// liteErrCode returns the SQLite result code of err (primary and
// extended) when it is the driver's error.
func liteErrCode(err error) (code, ext int, msg string, ok bool) {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return 0, 0, "", false
	}
	return e.Code() & 0xff, e.Code(), e.Error(), true
}
