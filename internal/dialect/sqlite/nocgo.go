//go:build !cgo

package sqlite

import (
	"context"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"

	"gorm.io/gorm"
)

// Without cgo the SQLite driver (mattn/go-sqlite3) cannot be linked. This
// stand-in keeps sqlite: DSNs recognised and makes Open, New and DDL say
// how to get SQLite, with dialect.ErrDialectUnavailable, instead of failing to
// build or calling the DSN unknown.

// New returns the SQLite stand-in of a CGO_ENABLED=0 build.
func New() dialect.Dialect { return liteUnavailable{} }

const liteHow = "SQLite needs cgo: build with CGO_ENABLED=1 and a C compiler (gcc), or use a postgres:// DSN"

var errLiteUnavailable = dialect.UnavailableError(dialect.SQLite, liteHow)

// liteUnavailable is the SQLite dialect of a CGO_ENABLED=0 build.
type liteUnavailable struct{}

func (liteUnavailable) Title() string { return "SQLite" }

func (liteUnavailable) ColumnTypes() models.ColumnTypes { return nil }

func (liteUnavailable) SemconvSystem() string { return "sqlite" }

func (liteUnavailable) Name() dialect.Name { return dialect.SQLite }
func (liteUnavailable) Capabilities() dialect.Capability {
	return dialect.CapSingleWriter | dialect.CapPartialIndexes
}
func (liteUnavailable) OwnsGorm(name string) bool             { return name == "sqlite" || name == "sqlite3" }
func (liteUnavailable) CheckConfig(cfg *dialect.Config) error { return checkSQLiteConfig(cfg) }
func (liteUnavailable) MatchDSN(dsn string) (string, bool, error) {
	return matchSQLiteDSN(dsn)
}
func (liteUnavailable) Open(context.Context, string, *dialect.Config) (*dialect.Conn, error) {
	return nil, errLiteUnavailable
}
func (liteUnavailable) Wrap(*gorm.DB, *dialect.Config) (*dialect.Conn, error) {
	return nil, errLiteUnavailable
}
func (liteUnavailable) Offline() (gorm.Dialector, func() error, error) {
	return nil, nil, errLiteUnavailable
}
func (liteUnavailable) CastParam(string) string                           { return "?" }
func (liteUnavailable) MigrateLock(*gorm.DB, *dialect.Env) error          { return errLiteUnavailable }
func (liteUnavailable) NewWaker(*dialect.Env, func(string)) dialect.Waker { return nil }
func (liteUnavailable) Catalog() dialect.Catalog                          { return nil }

func (liteUnavailable) NormalizeDDL(stmt string) string { return normalizeSQLiteDDL(stmt) }
func (liteUnavailable) ApplyNoTx(context.Context, *dialect.Env, int64, []string) error {
	return errLiteUnavailable
}
