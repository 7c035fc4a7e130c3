package sqlite

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
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

// sqlitePathProblem looks at the file system for why SQLite could not
// open the database file at path: a missing or unusable directory, a
// missing file (read-only opens never create one), a directory in the
// file's place, permissions. It returns "" when it finds nothing.
func sqlitePathProblem(path string, readOnly bool) string {
	if path == ":memory:" {
		return ""
	}
	dir := filepath.Dir(path)
	if i := strings.LastIndexAny(path, `/`+string(filepath.Separator)); i > 0 {
		dir = path[:i] // as the caller wrote it ("./data", not "data")
	}
	switch fi, err := os.Stat(dir); {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("directory %s does not exist", dir)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("permission denied on directory %s", dir)
	case err == nil && !fi.IsDir():
		return fmt.Sprintf("%s is not a directory", dir)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && readOnly:
		return "the file does not exist (a read-only open never creates it)"
	case errors.Is(err, fs.ErrNotExist):
		if !dirWritable(dir) {
			return fmt.Sprintf("the file does not exist and directory %s is not writable (permission denied)", dir)
		}
		return ""
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	case err != nil:
		return ""
	case fi.IsDir():
		return "it is a directory, not a file"
	}
	if f, err := os.Open(path); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return "permission denied reading the file"
		}
	} else {
		_ = f.Close()
	}
	if readOnly {
		return ""
	}
	if f, err := os.OpenFile(path, os.O_RDWR, 0); err != nil {
		if errors.Is(err, fs.ErrPermission) {
			return "the file is not writable (permission denied): fix its permissions, or open it with WithReadOnly"
		}
	} else {
		_ = f.Close()
	}
	if !dirWritable(dir) {
		return fmt.Sprintf("directory %s is not writable (SQLite creates the -wal and -shm files next to the database): fix its permissions, or open it with WithReadOnly", dir)
	}
	return ""
}

// dirWritable reports whether a file can be created in dir (it creates
// and removes one).
func dirWritable(dir string) bool {
	f, err := os.CreateTemp(dir, ".agentstore-probe-*")
	if err != nil {
		return !errors.Is(err, fs.ErrPermission)
	}
	name := f.Name()
	_ = f.Close()
	_ = os.Remove(name)
	return true
}
