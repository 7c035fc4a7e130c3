package agentstore_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
)

// verifyClean fails t unless Verify reports zero issues on st.
func verifyClean(t *testing.T, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	rep, err := st.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("Verify found %d issues on a %s schema that should be clean:\n%s", len(rep.Issues), st.Dialect(), rep)
	}
	return rep
}

func mustVerify(t *testing.T, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	rep, err := st.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// issueKeys renders the issues as sorted "kind table object" lines.
func issueKeys(issues []agentstore.SchemaIssue) []string {
	out := make([]string, 0, len(issues))
	for _, i := range issues {
		out = append(out, fmt.Sprintf("%s %s %s", i.Kind, i.Table, i.Object))
	}
	sort.Strings(out)
	return out
}

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
		gdb, err := gorm.Open(sqlite.Open("file:"+filepath.ToSlash(path)+"?_foreign_keys=off"), &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		sqlDB, _ := gdb.DB()
		t.Cleanup(func() { _ = sqlDB.Close() })
		st, err := agentstore.New(gdb)
		if err != nil {
			t.Fatal(err)
		}
		rep := mustVerify(t, st)
		if got := issueKeys(rep.Issues); !slices.Equal(got, []string{"foreign_keys_disabled  foreign_keys"}) {
			t.Fatalf("issues = %q\n%s", got, rep)
		}
	})
}
