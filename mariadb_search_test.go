package agentstore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
)

// mariaSearchIDs returns the sorted message ids a search finds (one page).
func mariaSearchIDs(t *testing.T, st *agentstore.Store, q string) []string {
	t.Helper()
	page, err := st.Sessions().Search(context.Background(), repo.SearchParams{Query: q, Limit: repo.MaxSearchLimit})
	if err != nil {
		t.Fatalf("search %q: %v", q, err)
	}
	var out []string
	for _, h := range page.Hits {
		out = append(out, h.MessageID)
	}
	slices.Sort(out)
	return out
}

// mariaText is a message with one text block.
func mariaText(id, text string) repo.Message {
	return repo.Message{ID: id, Role: repo.RoleUser, Content: []byte(`[{"type":"text","text":"` + text + `"}]`)}
}

// TestMariaDBSearchWordsTheIndexCannotHold: InnoDB's FULLTEXT index holds
// no word shorter than innodb_ft_min_token_size (3) or longer than
// innodb_ft_max_token_size (84); V15 builds it with stop words off. Such
// words, prefixes shorter than a token, and stop words are still found
// exactly (the query checks them over the candidate rows, or over every
// message when no word of the query is in the index); underscores and
// other punctuation separate words as on the other dialects.
func TestMariaDBSearchWordsTheIndexCannotHold(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	st := h.New(t)
	ctx := context.Background()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 90)
	if _, err := st.Sessions().AppendMessages(ctx, s.ID,
		mariaText("m1", "go to the shop and buy a qu"),
		mariaText("m2", "a gopher goes to the zoo"),
		mariaText("m3", "sessions_search.go is about the index"),
		mariaText("m4", "the word "+long+" is long"),
		mariaText("m5", "to be or not to be"),
	); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"go", []string{"m1", "m3"}},
		{"go*", []string{"m1", "m2", "m3"}},
		{"qu*", []string{"m1"}},
		{"q*", []string{"m1"}},
		{"a", []string{"m1", "m2"}},
		{"the", []string{"m1", "m2", "m3", "m4"}},
		{"about", []string{"m3"}},
		{`"to the"`, []string{"m1", "m2"}},
		{`"go to"`, []string{"m1"}},
		{`"to be"`, []string{"m5"}},
		{`"be to"`, nil},
		{"sessions", []string{"m3"}},
		{`"search go"`, []string{"m3"}},
		{"search_go", []string{"m3"}},
		{"shop go", []string{"m1"}},
		{"zoo go", nil},
		{long, []string{"m4"}},
		{strings.Repeat("x", 85) + "*", []string{"m4"}},
		{"to be or not", []string{"m5"}},
	} {
		if got := mariaSearchIDs(t, st, c.q); !slices.Equal(got, c.want) {
			t.Errorf("search %q = %v, want %v", c.q, got, c.want)
		}
	}
}

// TestMariaDBSearchV15Resumes: V15 interrupted half-way (its column and
// functions there, triggers and index not, messages not filled, no version
// row) is finished by the next Migrate, which indexes the messages stored
// meanwhile.
func TestMariaDBSearchV15Resumes(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	st := h.New(t)
	ctx := context.Background()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`DROP INDEX "idx_agentstore_messages_search" ON "agentstore_messages"`,
		`DROP TRIGGER "agentstore_messages_search_insert"`,
		`DROP TRIGGER "agentstore_messages_search_update"`,
		`DELETE FROM "agentstore_schema_version" WHERE version >= 15`,
	} {
		if err := st.DB(ctx).Exec(q).Error; err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, mariaText("old1", "stored before the index, marzipan"),
		mariaText("old2", "another marzipan")); err != nil {
		t.Fatal(err)
	}
	var unfilled int64
	if err := st.DB(ctx).Raw(`SELECT COUNT(*) FROM "agentstore_messages" WHERE "search_text" IS NULL`).Scan(&unfilled).Error; err != nil || unfilled != 2 {
		t.Fatalf("messages without search text before the re-run: %d, %v", unfilled, err)
	}
	if _, err := st.Sessions().Search(ctx, repo.SearchParams{Query: "marzipan"}); !errors.Is(err, agentstore.ErrSchemaBehind) {
		t.Fatalf("search without the index: %v, want ErrSchemaBehind", err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after a half-applied V15: %v", err)
	}
	if v, err := st.RecordedSchemaVersion(ctx); err != nil || v != agentstore.SchemaVersion {
		t.Fatalf("version %d, %v", v, err)
	}
	if err := st.DB(ctx).Raw(`SELECT COUNT(*) FROM "agentstore_messages" WHERE "search_text" IS NULL`).Scan(&unfilled).Error; err != nil || unfilled != 0 {
		t.Fatalf("messages without search text after the re-run: %d, %v", unfilled, err)
	}
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, mariaText("new", "marzipan after")); err != nil {
		t.Fatal(err)
	}
	if got := mariaSearchIDs(t, st, "marzipan"); !slices.Equal(got, []string{"new", "old1", "old2"}) {
		t.Fatalf("after the re-run: %v", got)
	}
}

// TestMariaDBVerifySearchIndex: Verify reports a missing FULLTEXT index
// and a missing search trigger, each with a fix that, run as given,
// restores search.
func TestMariaDBVerifySearchIndex(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	st := h.New(t)
	ctx := context.Background()
	search := func() []agentstore.SchemaIssue {
		var out []agentstore.SchemaIssue
		for _, is := range testkit.MustVerify(t, st).Issues {
			if is.Kind == agentstore.IssueSearchIndex {
				out = append(out, is)
			}
		}
		return out
	}
	if got := search(); len(got) != 0 {
		t.Fatalf("search issues after Migrate: %+v", got)
	}
	for _, q := range []string{`DROP INDEX "idx_agentstore_messages_search" ON "agentstore_messages"`, `DROP TRIGGER "agentstore_messages_search_insert"`} {
		if err := st.DB(ctx).Exec(q).Error; err != nil {
			t.Fatal(err)
		}
	}
	got := search()
	if keys := testkit.IssueKeys(got); !slices.Equal(keys, []string{
		"search_index agentstore_messages index idx_agentstore_messages_search",
		"search_index agentstore_messages trigger agentstore_messages_search_insert",
	}) {
		t.Fatalf("issues %q", keys)
	}
	for _, is := range got {
		if !strings.Contains(is.Fix, "CREATE") && !strings.Contains(is.Fix, "ADD FULLTEXT INDEX") {
			t.Fatalf("issue %+v: want the creating statements as the fix", is)
		}
		conn, err := st.SQLDB().Conn(ctx) // one session, as a client would run it
		if err != nil {
			t.Fatal(err)
		}
		for _, stmt := range strings.Split(strings.ReplaceAll(is.Fix, ";\n", "; "), "; ") {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("fix %q: %v", stmt, err)
			}
		}
		_ = conn.Close()
	}
	if got := search(); len(got) != 0 {
		t.Fatalf("after the fixes: %+v", got)
	}
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, mariaText("m1", "heliotrope")); err != nil {
		t.Fatal(err)
	}
	if got := mariaSearchIDs(t, st, "heliotrope"); !slices.Equal(got, []string{"m1"}) {
		t.Fatalf("search after the fixes: %v", got)
	}
}
