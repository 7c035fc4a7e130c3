package sqlite

import (
	"regexp"
	"strings"

	"github.com/agentstore/agentstore/internal/dialect"
)

// The parts of the SQLite dialect that need no driver, shared by the cgo
// build (dialect_sqlite.go) and its stand-in (dialect_sqlite_nocgo.go), so
// both accept and refuse the same DSNs and options.

// matchSQLiteDSN accepts sqlite:PATH and sqlite::memory:.
func matchSQLiteDSN(dsn string) (string, bool, error) {
	if !strings.HasPrefix(dsn, "sqlite:") {
		return "", false, nil
	}
	path := strings.TrimPrefix(dsn, "sqlite:")
	if path == "" {
		return "", true, dialect.Configf("sqlite DSN needs a path: sqlite:PATH or sqlite::memory:")
	}
	if strings.ContainsRune(path, 0) {
		return "", true, dialect.Configf("sqlite path contains a NUL byte")
	}
	return path, true, nil
}

// checkSQLiteConfig refuses WithSchema: SQLite has no schemas.
func checkSQLiteConfig(cfg *dialect.Config) error {
	if cfg.Schema != "" {
		return dialect.Configf("WithSchema is PostgreSQL only; SQLite has no schemas")
	}
	return nil
}

var (
	liteDefaultRE = regexp.MustCompile(`DEFAULT "((?:[^"]|"")*)"`)
)

// normalizeSQLiteDDL: backtick identifiers become double-quoted, and
// DEFAULT "x" becomes DEFAULT 'x'.
func normalizeSQLiteDDL(stmt string) string {
	stmt = liteDefaultRE.ReplaceAllStringFunc(stmt, func(m string) string {
		v := liteDefaultRE.FindStringSubmatch(m)[1]
		v = strings.ReplaceAll(strings.ReplaceAll(v, `""`, `"`), `'`, `''`)
		return "DEFAULT '" + v + "'"
	})
	return strings.ReplaceAll(stmt, "`", `"`)
}
