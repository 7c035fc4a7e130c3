//go:build cgo

package sqlite

import (
	"database/sql/driver"
	"errors"
	"strconv"
	"strings"

	"github.com/mattn/go-sqlite3"

	"github.com/agentstore/agentstore/internal/sqlitefts5"
)

// The SQLite driver of a cgo build: mattn/go-sqlite3 (the C SQLite, with
// FTS3/FTS4, a per-connection statement cache), with FTS5 (the search
// index's module since V16) compiled in by internal/sqlitefts5, since
// mattn/go-sqlite3 has it only with the sqlite_fts5 build tag. A CGO_ENABLED=0 build
// uses modernc.org/sqlite instead (driver_modernc.go). Everything else of
// the dialect is shared by both.

// liteDriverName names the driver (docs, errors, logs).
const liteDriverName = "mattn/go-sqlite3"

// liteDriver returns the driver.
func liteDriver() driver.Driver { return liteMattnDriver{} }

// liteMattnDriver is mattn/go-sqlite3's driver with FTS5 registered
// (internal/sqlitefts5) before its first connection.
type liteMattnDriver struct{}

// Open implements driver.Driver.
func (liteMattnDriver) Open(dsn string) (driver.Conn, error) {
	if err := sqlitefts5.Register(); err != nil {
		return nil, err
	}
	return (&sqlite3.SQLiteDriver{}).Open(dsn)
}

// liteDriverDSN builds the driver's DSN for path ("file:" URI, or
// ":memory:") with the busy timeout in ms, WAL (MEMORY for :memory:),
// foreign keys, BEGIN IMMEDIATE, the synchronous mode and the statement
// cache; readOnly opens the file with mode=ro, no journal-mode switch and
// no BEGIN IMMEDIATE.
func liteDriverDSN(path string, busyMS int64, sync string, readOnly bool) string {
	busy := strconv.FormatInt(busyMS, 10)
	params := "_journal_mode=WAL&_busy_timeout=" + busy + "&_foreign_keys=on&_txlock=immediate&_synchronous=" + sync +
		"&_stmt_cache_size=" + strconv.Itoa(sqliteStmtCache)
	if path == ":memory:" {
		return "file::memory:?" + strings.Replace(params, "_journal_mode=WAL", "_journal_mode=MEMORY", 1)
	}
	if readOnly {
		params = "mode=ro&_busy_timeout=" + busy + "&_foreign_keys=on&_stmt_cache_size=" + strconv.Itoa(sqliteStmtCache)
	}
	return "file:" + escapeLitePath(path) + "?" + params
}

// liteConnStmtCache is the number of compiled statements liteTimeoutConn
// keeps per connection: the driver keeps its own (_stmt_cache_size in the DSN).
const liteConnStmtCache = 0

// liteMemoryDSN is an in-memory database of its own (Offline).
const liteMemoryDSN = "file::memory:"

// liteErrCode returns the SQLite result code of err (primary and
// extended) when it is the driver's error.
func liteErrCode(err error) (code, ext int, msg string, ok bool) {
	var e sqlite3.Error
	if !errors.As(err, &e) {
		return 0, 0, "", false
	}
	return int(e.Code), int(e.ExtendedCode), e.Error(), true
}
