//go:build !cgo

package agentstore

import (
	"context"
	"github.com/agentstore/agentstore/models"

	"gorm.io/gorm"
)

// Without cgo the SQLite driver (mattn/go-sqlite3) cannot be linked. This
// stand-in keeps sqlite: DSNs recognised and makes Open, New and DDL say
// how to get SQLite, with ErrDialectUnavailable, instead of failing to
// build or calling the DSN unknown.

// sqliteDialect is the SQLite stand-in of a CGO_ENABLED=0 build.
func sqliteDialect() dialect { return liteUnavailable{} }

const liteHow = "SQLite needs cgo: build with CGO_ENABLED=1 and a C compiler (gcc), or use a postgres:// DSN"

var errLiteUnavailable = unavailableError(SQLite, liteHow)

// liteUnavailable is the SQLite dialect of a CGO_ENABLED=0 build.
type liteUnavailable struct{}

func (liteUnavailable) title() string { return "SQLite" }

func (liteUnavailable) columnTypes() models.ColumnTypes { return nil }

func (liteUnavailable) semconvSystem() string { return "sqlite" }

func (liteUnavailable) name() Dialect                 { return SQLite }
func (liteUnavailable) capabilities() Capability      { return CapSingleWriter | CapPartialIndexes }
func (liteUnavailable) ownsGorm(name string) bool     { return name == "sqlite" || name == "sqlite3" }
func (liteUnavailable) checkConfig(cfg *config) error { return checkSQLiteConfig(cfg) }
func (liteUnavailable) matchDSN(dsn string) (string, bool, error) {
	return matchSQLiteDSN(dsn)
}
func (liteUnavailable) open(context.Context, string, *config) (*dialectConn, error) {
	return nil, errLiteUnavailable
}
func (liteUnavailable) wrap(*gorm.DB, *config) (*dialectConn, error) { return nil, errLiteUnavailable }
func (liteUnavailable) offline() (gorm.Dialector, func() error, error) {
	return nil, nil, errLiteUnavailable
}
func (liteUnavailable) castParam(string) string             { return "?" }
func (liteUnavailable) migrateLock(*gorm.DB, *Store) error  { return errLiteUnavailable }
func (liteUnavailable) newWaker(*Store, func(string)) waker { return nil }
func (liteUnavailable) catalog() catalogReader              { return nil }

func (liteUnavailable) normalizeDDL(stmt string) string { return normalizeSQLiteDDL(stmt) }
func (liteUnavailable) applyNoTx(context.Context, *Store, int64, []string) error {
	return errLiteUnavailable
}
