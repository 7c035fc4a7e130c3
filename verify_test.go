package agentstore_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
)

// TestVerify_ForeignKeysDisabled: Verify reports a SQLite connection with
// the foreign_keys pragma off. It stays outside the conformance suite: it
// is SQLite-only and opens its own GORM connection on the database file.
func TestVerify_ForeignKeysDisabled(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		if h.Dialect != agentstore.SQLite {
			t.Skip("the foreign_keys pragma exists only on SQLite")
		}
		h.New(t) // create the schema with foreign keys on
		path := strings.TrimPrefix(h.DSN, "sqlite:")
		gdb, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: testSQLiteDriver, DSN: "file:" + filepath.ToSlash(path) + "?_foreign_keys=off"}), &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		sqlDB, _ := gdb.DB()
		t.Cleanup(func() { _ = sqlDB.Close() })
		st, err := agentstore.New(gdb)
		if err != nil {
			t.Fatal(err)
		}
		rep := testkit.MustVerify(t, st)
		if got := testkit.IssueKeys(rep.Issues); !slices.Equal(got, []string{"foreign_keys_disabled  foreign_keys"}) {
			t.Fatalf("issues = %q\n%s", got, rep)
		}
	})
}
