package agentstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
)

// TestVerify_SearchTriggerFix: a dropped search trigger (and, on
// PostgreSQL, a dropped text function) is reported with the statements of
// the migration chain that create it as the fix — not "run migrate",
// which at head repairs indexes only — and running the fixes leaves
// Verify clean and new messages searchable again.
func TestVerify_SearchTriggerFix(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
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
		switch h.Dialect {
		case agentstore.Postgres:
			exec(`DROP TRIGGER "trg_messages_search" ON ` + q("agentstore_messages"))
			exec(`DROP FUNCTION ` + q("agentstore_message_text") + `(json)`)
		default:
			exec(`DROP TRIGGER "agentstore_messages_search_insert"`)
		}
		rep := testkit.MustVerify(t, st)
		if len(rep.Issues) == 0 {
			t.Fatal("no issue for the dropped search objects")
		}
		for _, is := range rep.Issues {
			if strings.Contains(is.Fix, "migrate") || !strings.Contains(is.Fix, "CREATE") {
				t.Fatalf("issue %+v: want the creating statements as the fix", is)
			}
			if strings.HasPrefix(is.Object, "function") && !strings.Contains(is.Fix, "plpgsql") {
				t.Fatalf("function fix is not the head's (V11, PL/pgSQL) definition: %s", is.Fix)
			}
		}
		for _, is := range rep.Issues { // the function first on PostgreSQL: Verify lists it first
			for _, stmt := range strings.Split(is.Fix, ";\n") {
				exec(stmt)
			}
		}
		if got := testkit.IssueKeys(testkit.MustVerify(t, st).Issues); len(got) != 0 {
			t.Fatalf("after the fixes: issues = %q", got)
		}
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: "m1", Role: repo.RoleUser,
			Content: []byte(`[{"type":"text","text":"heliotrope"}]`)}); err != nil {
			t.Fatal(err)
		}
		page, err := st.Sessions().Search(ctx, repo.SearchParams{Query: "heliotrope"})
		if err != nil || len(page.Hits) != 1 {
			t.Fatalf("search after the fixes: %+v, %v", page, err)
		}
	})
}
