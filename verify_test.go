package agentstore_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
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

// TestVerify_ChangeFeedTriggers: Verify reports each change-feed object
// that is missing or disabled (IssueChangeFeed) — while one is, writes
// commit without their change rows — and applying the reported fixes
// restores the feed: Verify is clean again and a queue item's state change
// reaches the feed.
func TestVerify_ChangeFeedTriggers(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		if got := testkit.IssueKeys(testkit.MustVerify(t, st).Issues); len(got) != 0 {
			t.Fatalf("fresh schema: issues = %q", got)
		}
		exec := func(q string) {
			t.Helper()
			if _, err := st.SQLDB().ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		q := func(name string) string {
			if h.Schema != "" {
				return `"` + h.Schema + `"."` + name + `"`
			}
			return `"` + name + `"`
		}
		var want []string
		switch h.Dialect {
		case agentstore.Postgres:
			// The function dropped with its three triggers, then one of
			// them recreated and disabled: four objects, two states.
			exec(`DROP FUNCTION ` + q("agentstore_session_change") + `() CASCADE`)
			want = []string{
				"change_feed  function agentstore_session_change",
				"change_feed agentstore_queue trigger trg_queue_change_insert",
				"change_feed agentstore_queue trigger trg_queue_change_status",
				"change_feed agentstore_sessions trigger trg_sessions_change",
			}
		default:
			exec(`DROP TRIGGER "agentstore_queue_change_status"`)
			exec(`DROP TRIGGER "agentstore_sessions_change_delete"`)
			want = []string{
				"change_feed agentstore_queue trigger agentstore_queue_change_status",
				"change_feed agentstore_sessions trigger agentstore_sessions_change_delete",
			}
		}
		rep := testkit.MustVerify(t, st)
		if got := testkit.IssueKeys(rep.Issues); !slices.Equal(got, want) {
			t.Fatalf("issues = %q, want %q\n%s", got, want, rep)
		}
		for _, is := range rep.Issues {
			if is.Actual != "missing" || is.Fix == "" {
				t.Fatalf("issue %+v: want missing with a fix", is)
			}
		}
		if h.Dialect == agentstore.Postgres {
			// The function's fix first (the triggers need it).
			for _, is := range rep.Issues {
				if strings.HasPrefix(is.Object, "function") {
					if strings.Contains(is.Fix, "CREATE TRIGGER") {
						t.Fatalf("the function's fix creates triggers too: %s", is.Fix)
					}
					exec(is.Fix)
				}
			}
			for _, is := range rep.Issues {
				if strings.HasPrefix(is.Object, "trigger") {
					for _, stmt := range strings.Split(is.Fix, ";\n") {
						exec(stmt)
					}
				}
			}
			exec(`ALTER TABLE ` + q("agentstore_queue") + ` DISABLE TRIGGER "trg_queue_change_status"`)
			rep = testkit.MustVerify(t, st)
			if len(rep.Issues) != 1 || rep.Issues[0].Actual != "disabled" || rep.Issues[0].Expected != "enabled" ||
				!strings.Contains(rep.Issues[0].Fix, "ENABLE TRIGGER") {
				t.Fatalf("disabled trigger: issues = %+v", rep.Issues)
			}
		}
		for _, is := range rep.Issues {
			for _, stmt := range strings.Split(is.Fix, ";\n") {
				exec(stmt)
			}
		}
		if got := testkit.IssueKeys(testkit.MustVerify(t, st).Issues); len(got) != 0 {
			t.Fatalf("after the fixes: issues = %q", got)
		}
		// The restored triggers write the feed again.
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := st.SessionQueue().Enqueue(ctx, s.ID, "x", 0); err != nil {
			t.Fatal(err)
		}
		it, err := st.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w"})
		if err != nil || it == nil {
			t.Fatalf("dequeue: %v, %v", it, err)
		}
		// On PostgreSQL a change is delivered once no older transaction on
		// the server is running (docs/changes.md): other tests' transactions
		// can hold it back for a moment.
		wantFeed := []string{"session.created created", "queue.item pending", "queue.item processing"}
		var got []string
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			page, err := st.ChangeFeed().Changes(ctx, repo.ChangesParams{SessionID: s.ID})
			if err != nil {
				t.Fatal(err)
			}
			got = got[:0]
			for _, c := range page.Changes {
				got = append(got, string(c.Kind)+" "+c.State)
			}
			if len(got) >= len(wantFeed) || time.Now().After(deadline) {
				break
			}
		}
		if !slices.Equal(got, wantFeed) {
			t.Fatalf("feed after the fixes = %q, want %q", got, wantFeed)
		}
	})
}
