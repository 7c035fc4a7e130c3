package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/migrations"
	"github.com/agentstore/agentstore/repo"
)

// TestSearchUpgradeIndexesExistingMessages: messages written before V8
// (more than two of PostgreSQL's backfill batches of 5000, string and
// block content, in sessions of a tenant, one session deleted before the
// upgrade) are found by Search after Migrate brings the database to V8;
// messages appended afterwards are found too, Verify is clean, and a
// Search on the database still at V7 is ErrSchemaBehind, not a driver
// error.
func TestSearchUpgradeIndexesExistingMessages(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		old := h.Open(t)
		if err := old.MigrateTo(ctx, 7); err != nil {
			t.Fatal(err)
		}
		r := old.ForTenant("acme").Sessions()
		const sessions, perSession = 12, 1000
		var ids []repo.Session
		for i := range sessions {
			s := repo.NewSession()
			if err := r.Save(ctx, s); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, *s)
			for b := 0; b < perSession; b += 500 {
				msgs := make([]repo.Message, 0, 500)
				for j := b; j < b+500; j++ {
					text := fmt.Sprintf("ordinary filler %d %d", i, j)
					if j%100 == 7 {
						text = fmt.Sprintf("the rare heliotrope %d %d", i, j)
					}
					content, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
					if j%2 == 1 {
						content, _ = json.Marshal(text) // the string form
					}
					msgs = append(msgs, repo.Message{ID: fmt.Sprintf("m%d", j), Role: repo.RoleUser, Content: content})
				}
				if _, err := r.AppendMessages(ctx, s.ID, msgs...); err != nil {
					t.Fatal(err)
				}
			}
		}
		if ok, err := r.Delete(ctx, ids[0].ID); !ok || err != nil {
			t.Fatalf("delete: %v %v", ok, err)
		}
		if _, err := r.Search(ctx, repo.SearchParams{Query: "heliotrope"}); !errors.Is(err, agentstore.ErrSchemaBehind) || !errors.As(err, new(*repo.Error)) {
			t.Fatalf("search at V7: %v, want ErrSchemaBehind", err)
		}
		st := h.Open(t)
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("migrate to V8: %v", err)
		}
		testkit.VerifyClean(t, st)
		rs := st.ForTenant("acme").Sessions()
		count := func(q string) int {
			n := 0
			p := repo.SearchParams{Query: q, Limit: repo.MaxSearchLimit}
			for {
				page, err := rs.Search(ctx, p)
				if err != nil {
					t.Fatalf("search %q: %v", q, err)
				}
				n += len(page.Hits)
				if page.Next == "" {
					return n
				}
				p.After = page.Next
			}
		}
		// 10 rare messages per session, 11 sessions left.
		if n := count("heliotrope"); n != 10*(sessions-1) {
			t.Fatalf("heliotrope: %d hits after the upgrade, want %d", n, 10*(sessions-1))
		}
		if n := count("filler 5 99*"); n != 11 {
			t.Errorf(`"filler 5 99*": %d hits, want 11 (m99, m990..m999)`, n)
		}
		if _, err := rs.AppendMessages(ctx, ids[1].ID, testkit.TextMsg("new", repo.RoleUser, "a new heliotrope")); err != nil {
			t.Fatal(err)
		}
		if n := count("heliotrope"); n != 10*(sessions-1)+1 {
			t.Errorf("heliotrope after an append: %d hits", n)
		}
		if n, err := st.ForTenant("other").Sessions().Search(ctx, repo.SearchParams{Query: "heliotrope"}); err != nil || len(n.Hits) != 0 {
			t.Errorf("another tenant: %+v, %v", n, err)
		}
	})
}

// TestSearchUpgradeV12: messages written at V11 are found after Migrate
// brings the database to V12, and appends afterwards are found too; on
// PostgreSQL the search index has V12's 128 kB pending list (a fresh
// database gets it from the baseline's DDL as well: TestDDLExported_*).
func TestSearchUpgradeV12(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		old := h.Open(t)
		if err := old.MigrateTo(ctx, 11); err != nil {
			t.Fatal(err)
		}
		r := old.Sessions()
		s := repo.NewSession()
		if err := r.Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		msgs := make([]repo.Message, 0, 300)
		for j := range 300 {
			text := fmt.Sprintf("ordinary filler %d", j)
			if j%100 == 7 {
				text = "the rare heliotrope, café"
			}
			msgs = append(msgs, testkit.TextMsg(fmt.Sprintf("m%d", j), repo.RoleUser, text))
		}
		if _, err := r.AppendMessages(ctx, s.ID, msgs...); err != nil {
			t.Fatal(err)
		}
		st := h.Open(t)
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("migrate to V12: %v", err)
		}
		testkit.VerifyClean(t, st)
		rs := st.Sessions()
		if _, err := rs.AppendMessages(ctx, s.ID, testkit.TextMsg("new", repo.RoleUser, "a new Heliotrope")); err != nil {
			t.Fatal(err)
		}
		page, err := rs.Search(ctx, repo.SearchParams{Query: "heliotrope", Limit: repo.MaxSearchLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Hits) != 4 {
			t.Errorf("heliotrope: %d hits, want 4 (3 before the upgrade, 1 after)", len(page.Hits))
		}
		if h.Dialect != agentstore.Postgres {
			return
		}
		var opts string
		if err := st.DB(ctx).Raw(`SELECT COALESCE(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = to_regclass(?)`,
			h.Schema+".idx_"+st.TablePrefix()+"messages_search").Scan(&opts).Error; err != nil {
			t.Fatal(err)
		}
		if opts != "gin_pending_list_limit=128" {
			t.Errorf("search index options %q, want gin_pending_list_limit=128", opts)
		}
	})
}

// TestSearchUpgradeV16: on SQLite, a search index that is an FTS4 table
// (as a cgo build made it before V16; forged from V8's statements as
// written, in a build whose driver has FTS4) answers Search with
// ErrSchemaBehind, not a driver error, while appends keep indexing into
// it; Migrate to V16 makes it an FTS5 table holding every message written
// before, Verify is clean, and appends afterwards are found too. On the
// other dialects (and without FTS4) V16 records its version and search
// works across it.
func TestSearchUpgradeV16(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		old := h.Open(t)
		if err := old.MigrateTo(ctx, 15); err != nil {
			t.Fatal(err)
		}
		fts4 := h.Dialect == agentstore.SQLite && testSQLiteHasFTS4
		ftsSQL := func(st *agentstore.Store) string {
			var sql string
			if err := st.SQLDB().QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE name = ?`, st.TablePrefix()+"message_fts").Scan(&sql); err != nil {
				t.Fatal(err)
			}
			return sql
		}
		if fts4 {
			chain, err := migrations.Chain("sqlite")
			if err != nil {
				t.Fatal(err)
			}
			p := old.TablePrefix()
			stmts := []string{
				`DROP TRIGGER "` + p + `messages_search_insert"`, `DROP TRIGGER "` + p + `messages_search_delete"`,
				`DROP TRIGGER "` + p + `messages_search_update"`, `DROP TABLE "` + p + `message_fts"`,
			}
			for _, st := range migrations.Statements(migrations.Render(chain[7].SQL, p, "")) {
				if strings.HasPrefix(st, "CREATE VIRTUAL TABLE") || strings.HasPrefix(st, "CREATE TRIGGER") {
					stmts = append(stmts, st)
				}
			}
			for _, q := range stmts {
				if _, err := old.SQLDB().ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if sql := ftsSQL(old); !strings.Contains(sql, "fts4") {
				t.Fatalf("forged index %q, want FTS4", sql)
			}
		}
		r := old.Sessions()
		s := repo.NewSession()
		if err := r.Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		msgs := make([]repo.Message, 0, 300)
		for j := range 300 {
			text := fmt.Sprintf("ordinary filler %d", j)
			if j%100 == 7 {
				text = "the rare heliotrope, café"
			}
			msgs = append(msgs, testkit.TextMsg(fmt.Sprintf("m%d", j), repo.RoleUser, text))
		}
		if _, err := r.AppendMessages(ctx, s.ID, msgs...); err != nil {
			t.Fatal(err)
		}
		if fts4 {
			if _, err := r.Search(ctx, repo.SearchParams{Query: "heliotrope"}); !errors.Is(err, agentstore.ErrSchemaBehind) || !errors.As(err, new(*repo.Error)) {
				t.Fatalf("search of an FTS4 index: %v, want ErrSchemaBehind", err)
			}
		}
		st := h.Open(t)
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("migrate to V16: %v", err)
		}
		testkit.VerifyClean(t, st)
		if h.Dialect == agentstore.SQLite {
			if sql := ftsSQL(st); !strings.Contains(sql, "fts5") {
				t.Fatalf("index after V16 %q, want FTS5", sql)
			}
		}
		rs := st.Sessions()
		if _, err := rs.AppendMessages(ctx, s.ID, testkit.TextMsg("new", repo.RoleUser, "a new Heliotrope")); err != nil {
			t.Fatal(err)
		}
		page, err := rs.Search(ctx, repo.SearchParams{Query: "heliotrope", Limit: repo.MaxSearchLimit})
		if err != nil || len(page.Hits) != 4 {
			t.Fatalf("heliotrope after V16: %d hits, %v; want 4", len(page.Hits), err)
		}
		if page, err := rs.Search(ctx, repo.SearchParams{Query: "cafe filler"}); err != nil || len(page.Hits) != 0 {
			t.Fatalf("cafe filler: %+v, %v; want none", page, err)
		}
		if page, err := rs.Search(ctx, repo.SearchParams{Query: `"ordinary filler 29*"`, Limit: repo.MaxSearchLimit}); err != nil || len(page.Hits) != 11 {
			t.Fatalf(`"ordinary filler 29*": %d hits, %v; want 11 (29, 290..299)`, len(page.Hits), err)
		}
	})
}
