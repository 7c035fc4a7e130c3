package agentstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/repo"
)

// searchTests are the Search area's tests: full-text search over messages
// (Sessions.Search).
func searchTests() []test {
	return tests(
		test{"SearchWordsPhrasesPrefixes", testSearchWordsPhrasesPrefixes},
		test{"SearchIndexesTextNotJSON", testSearchIndexesTextNotJSON},
		test{"SearchFilters", testSearchFilters},
		test{"SearchTenantIsolation", testSearchTenantIsolation},
		test{"SearchCursorPagingExact", testSearchCursorPagingExact},
		test{"SearchSnippetHighlights", testSearchSnippetHighlights},
		test{"SearchIdempotentRetryOneHit", testSearchIdempotentRetryOneHit},
		test{"SearchDeletedSessionsNotFound", testSearchDeletedSessionsNotFound},
		test{"SearchBranchesAndForks", testSearchBranchesAndForks},
		test{"SearchConcurrentAppendsIndexed", testSearchConcurrentAppendsIndexed},
		test{"SearchHostileInputs", testSearchHostileInputs},
		test{"SearchLargeMessage", testSearchLargeMessage},
	)
}

// srch runs a search that must succeed.
func srch(t *testing.T, r repo.Sessions, p repo.SearchParams) repo.SearchPage {
	t.Helper()
	page, err := r.Search(context.Background(), p)
	if err != nil {
		t.Fatalf("search %q: %v", p.Query, err)
	}
	return page
}

// srchIDs returns the message ids of a search's first page (up to the
// largest page), sorted, for set comparisons.
func srchIDs(t *testing.T, r repo.Sessions, p repo.SearchParams) []string {
	t.Helper()
	if p.Limit == 0 {
		p.Limit = repo.MaxSearchLimit
	}
	page := srch(t, r, p)
	out := make([]string, 0, len(page.Hits))
	for _, h := range page.Hits {
		out = append(out, h.MessageID)
	}
	slices.Sort(out)
	return out
}

// srchAll walks every page of p with page size limit and returns the hits.
func srchAll(t *testing.T, r repo.Sessions, p repo.SearchParams, limit int) []repo.SearchHit {
	t.Helper()
	p.Limit = limit
	var out []repo.SearchHit
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("search walk does not end")
		}
		page := srch(t, r, p)
		if len(page.Hits) > limit {
			t.Fatalf("page of %d hits, limit %d", len(page.Hits), limit)
		}
		out = append(out, page.Hits...)
		if page.Next == "" {
			return out
		}
		if len(page.Hits) < limit {
			t.Fatalf("a short page (%d of %d) with a next cursor", len(page.Hits), limit)
		}
		p.After = page.Next
	}
}

func contentMsg(id string, role repo.Role, content string) repo.Message {
	return repo.Message{ID: id, Role: role, Content: json.RawMessage(content)}
}

func ids(v ...string) []string { slices.Sort(v); return v }

// testSearchWordsPhrasesPrefixes: a message matches when it holds every
// term: words (case-insensitive, whole words), phrases (in order, adjacent)
// and prefixes; hits carry the message's session, id, seq, role and
// created_at and come most relevant first.
func testSearchWordsPhrasesPrefixes(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	s := repo.NewSession()
	mustSave(t, r, s)
	stored, err := r.AppendMessages(context.Background(), s.ID,
		textMsg("m1", repo.RoleUser, "The quick brown fox jumps over the lazy dog"),
		textMsg("m2", repo.RoleAssistant, "Brown dogs are quick to learn"),
		textMsg("m3", repo.RoleUser, "Quickly, quickly: running late"),
		textMsg("m4", repo.RoleAssistant, "fox fox fox, a fox story about the fox"),
		textMsg("m5", repo.RoleUser, "nothing relevant here"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		q    string
		want []string
	}{
		{"quick", ids("m1", "m2")},
		{"QUICK", ids("m1", "m2")},
		{"quick*", ids("m1", "m2", "m3")},
		{"qui*", ids("m1", "m2", "m3")},
		{"quick brown", ids("m1", "m2")},
		{`"quick brown"`, ids("m1")},
		{`"brown quick"`, ids()},
		{`"brown fox" lazy`, ids("m1")},
		{`"lazy do*"`, ids("m1")},
		{"fox", ids("m1", "m4")},
		{"fox dog", ids("m1")},
		{"elephant", ids()},
		{"quick elephant", ids()},
		{"running late", ids("m3")},
	}
	for _, c := range cases {
		if got := srchIDs(t, r, repo.SearchParams{Query: c.q}); !slices.Equal(got, c.want) {
			t.Errorf("search %q = %v, want %v", c.q, got, c.want)
		}
	}
	page := srch(t, r, repo.SearchParams{Query: "fox"})
	if len(page.Hits) != 2 || page.Next != "" {
		t.Fatalf("search fox: %+v", page)
	}
	if page.Hits[0].MessageID != "m4" {
		t.Errorf("fox: the message with five foxes is not first: %s (scores %v, %v)", page.Hits[0].MessageID, page.Hits[0].Score, page.Hits[1].Score)
	}
	for i, hit := range page.Hits {
		if i > 0 && hit.Score > page.Hits[i-1].Score {
			t.Errorf("hits not by score descending: %v then %v", page.Hits[i-1].Score, hit.Score)
		}
		if hit.Score <= 0 {
			t.Errorf("hit %s score %v, want > 0", hit.MessageID, hit.Score)
		}
		var m repo.Message
		for _, sm := range stored {
			if sm.ID == hit.MessageID {
				m = sm
			}
		}
		if hit.SessionID != s.ID || hit.Seq != m.Seq || hit.Role != m.Role || !hit.CreatedAt.Equal(m.CreatedAt) || hit.CreatedAt.Location() != time.UTC {
			t.Errorf("hit %+v does not describe the stored message %+v", hit, m)
		}
	}
}

// testSearchIndexesTextNotJSON: the indexed text is the content string,
// the strings of the top-level array and every text or content member (a
// tool result's nested blocks too); JSON keys, block types, ids and other
// members are not found.
func testSearchIndexesTextNotJSON(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	s := repo.NewSession()
	mustSave(t, r, s)
	if _, err := r.AppendMessages(context.Background(), s.ID,
		contentMsg("str", repo.RoleUser, `"a plain string about walruses"`),
		contentMsg("bare", repo.RoleUser, `["a bare element about narwhals", {"type": "text", "text": "and a block about otters"}]`),
		contentMsg("tool", repo.RoleTool, `[{"type": "tool_result", "tool_use_id": "toolu_zebra", "content": [{"type": "text", "text": "nested penguins"}]},
			{"type": "tool_result", "tool_use_id": "x", "content": "flat pelicans"}]`),
		contentMsg("use", repo.RoleAssistant, `[{"type": "tool_use", "id": "toolu_giraffe", "name": "lookup_camels", "input": {"query": "llamas", "text": "deep alpacas"}}]`),
		contentMsg("esc", repo.RoleUser, `[{"type": "text", "text": "caf\u00e9 \"quoted\" back\\slash"}]`),
	); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		q    string
		want []string
	}{
		{"walruses", ids("str")},
		{"narwhals", ids("bare")},
		{"otters", ids("bare")},
		{"penguins", ids("tool")},
		{"pelicans", ids("tool")},
		{"alpacas", ids("use")},
		{"quoted", ids("esc")},
		{"slash", ids("esc")},
		// Not text: keys, block types, ids, names, other members.
		{"type", ids()},
		{"text", ids()},
		{"tool_result", ids()},
		{"zebra", ids()},
		{"giraffe", ids()},
		{"camels", ids()},
		{"llamas", ids()},
		{"input", ids()},
		{"u00e9", ids()},
	}
	for _, c := range cases {
		if got := srchIDs(t, r, repo.SearchParams{Query: c.q}); !slices.Equal(got, c.want) {
			t.Errorf("search %q = %v, want %v", c.q, got, c.want)
		}
	}
}

// testSearchFilters: the session, role and time-range filters and the
// TenantID filter of an unscoped handle combine with the query.
func testSearchFilters(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	a, b := repo.NewSession(), repo.NewSession()
	a.TenantID = "t1"
	mustSave(t, r, a)
	mustSave(t, r, b)
	t0 := clock.Now()
	if _, err := r.AppendMessages(ctx, a.ID, textMsg("a1", repo.RoleUser, "deploy the service"),
		textMsg("a2", repo.RoleAssistant, "deploy done")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	t1 := clock.Now()
	if _, err := r.AppendMessages(ctx, b.ID, textMsg("b1", repo.RoleUser, "deploy again"),
		textMsg("b2", repo.RoleSystem, "system says deploy")); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	t2 := clock.Now()
	none := ""
	t1s := "t1"
	cases := []struct {
		name string
		p    repo.SearchParams
		want []string
	}{
		{"all", repo.SearchParams{}, ids("a1", "a2", "b1", "b2")},
		{"session a", repo.SearchParams{SessionID: &a.ID}, ids("a1", "a2")},
		{"unknown session", repo.SearchParams{SessionID: ptr(uuid.New())}, ids()},
		{"user", repo.SearchParams{Roles: []repo.Role{repo.RoleUser}}, ids("a1", "b1")},
		{"user+system", repo.SearchParams{Roles: []repo.Role{repo.RoleUser, repo.RoleSystem}}, ids("a1", "b1", "b2")},
		{"from t1", repo.SearchParams{CreatedFrom: &t1}, ids("b1", "b2")},
		{"before t1", repo.SearchParams{CreatedBefore: &t1}, ids("a1", "a2")},
		{"t0..t2", repo.SearchParams{CreatedFrom: &t0, CreatedBefore: &t2}, ids("a1", "a2", "b1", "b2")},
		{"from t2", repo.SearchParams{CreatedFrom: &t2}, ids()},
		{"tenant t1", repo.SearchParams{TenantID: &t1s}, ids("a1", "a2")},
		{"no tenant", repo.SearchParams{TenantID: &none}, ids("b1", "b2")},
		{"session b user", repo.SearchParams{SessionID: &b.ID, Roles: []repo.Role{repo.RoleUser}}, ids("b1")},
	}
	for _, c := range cases {
		c.p.Query = "deploy"
		if got := srchIDs(t, r, c.p); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if _, err := r.Search(ctx, repo.SearchParams{Query: "deploy", Roles: []repo.Role{"robot"}}); !isInvalid(err) {
		t.Errorf("unknown role: %v, want ErrInvalidInput", err)
	}
}

// isInvalid reports whether err is the session API's ErrInvalidInput.
func isInvalid(err error) bool {
	var re *repo.Error
	return errors.Is(err, repo.ErrInvalidInput) && errors.As(err, &re)
}

// testSearchTenantIsolation: a tenant view finds its own tenant's messages
// only, whatever TenantID or SessionID it is given.
func testSearchTenantIsolation(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	alpha, beta := st.ForTenant("alpha"), st.ForTenant("beta")
	sa, sb, sg := repo.NewSession(), repo.NewSession(), repo.NewSession()
	sa.AddMessage(textMsg("ma", repo.RoleUser, "secret plans alpha"))
	sb.AddMessage(textMsg("mb", repo.RoleUser, "secret plans beta"))
	sg.AddMessage(textMsg("mg", repo.RoleUser, "secret plans global"))
	mustSave(t, alpha.Sessions(), sa)
	mustSave(t, beta.Sessions(), sb)
	mustSave(t, st.Sessions(), sg)
	q := "secret plans"
	if got := srchIDs(t, alpha.Sessions(), repo.SearchParams{Query: q}); !slices.Equal(got, ids("ma")) {
		t.Errorf("alpha finds %v", got)
	}
	other := "beta"
	if got := srchIDs(t, alpha.Sessions(), repo.SearchParams{Query: q, TenantID: &other}); !slices.Equal(got, ids("ma")) {
		t.Errorf("alpha with TenantID beta finds %v", got)
	}
	if got := srchIDs(t, alpha.Sessions(), repo.SearchParams{Query: q, SessionID: &sb.ID}); len(got) != 0 {
		t.Errorf("alpha finds beta's session: %v", got)
	}
	if got := srchIDs(t, beta.Sessions(), repo.SearchParams{Query: q}); !slices.Equal(got, ids("mb")) {
		t.Errorf("beta finds %v", got)
	}
	if got := srchIDs(t, st.ForTenant("gamma").Sessions(), repo.SearchParams{Query: q}); len(got) != 0 {
		t.Errorf("gamma finds %v", got)
	}
	if got := srchIDs(t, st.Sessions(), repo.SearchParams{Query: q}); !slices.Equal(got, ids("ma", "mb", "mg")) {
		t.Errorf("the unscoped handle finds %v", got)
	}
	if _, err := st.ForTenant("").Sessions().Search(context.Background(), repo.SearchParams{Query: q}); !errors.Is(err, repo.ErrInvalidInput) {
		t.Errorf("empty tenant view: %v", err)
	}
}

// testSearchCursorPagingExact: every page size walks the same hits in the
// same order as one big page, each once (scores tie across sessions and
// differ within them); a walk during which messages are appended still
// returns every message that existed for the whole walk exactly once; a
// cursor of another search is ErrInvalidInput.
func testSearchCursorPagingExact(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	var sessions []uuid.UUID
	for i := range 4 {
		s := repo.NewSession()
		mustSave(t, r, s)
		sessions = append(sessions, s.ID)
		var msgs []repo.Message
		for j := range 15 {
			// 1..3 occurrences of the word: ties within and across sessions.
			text := strings.Repeat("needle ", 1+j%3) + fmt.Sprintf("filler %d %d", i, j)
			msgs = append(msgs, textMsg(fmt.Sprintf("s%dm%02d", i, j), repo.RoleUser, text))
		}
		msgs = append(msgs, textMsg(fmt.Sprintf("s%dother", i), repo.RoleUser, "no match here"))
		if _, err := r.AppendMessages(ctx, s.ID, msgs...); err != nil {
			t.Fatal(err)
		}
	}
	p := repo.SearchParams{Query: "needle"}
	key := func(hs []repo.SearchHit) []string {
		out := make([]string, len(hs))
		for i, h := range hs {
			out[i] = fmt.Sprintf("%s/%d", h.SessionID, h.Seq)
		}
		return out
	}
	full := srchAll(t, r, p, repo.MaxSearchLimit)
	if len(full) != 60 {
		t.Fatalf("one page holds %d hits, want 60", len(full))
	}
	for i := 1; i < len(full); i++ {
		a, b := full[i-1], full[i]
		if a.Score < b.Score || (a.Score == b.Score && (a.SessionID.String() > b.SessionID.String() ||
			(a.SessionID == b.SessionID && a.Seq >= b.Seq))) {
			t.Fatalf("hits %d, %d out of order (score, session, seq): %+v / %+v", i-1, i, a, b)
		}
	}
	for _, n := range []int{1, 2, 7, 13, 59, 60, 61} {
		if got := key(srchAll(t, r, p, n)); !slices.Equal(got, key(full)) {
			t.Errorf("page size %d walks %d hits, differing from one page", n, len(got))
		}
	}
	// Appends during a walk: the original hits each come exactly once.
	p.Limit = 7
	seen := map[string]int{}
	for i := 0; ; i++ {
		page := srch(t, r, p)
		for _, h := range page.Hits {
			seen[fmt.Sprintf("%s/%d", h.SessionID, h.Seq)]++
		}
		if page.Next == "" {
			break
		}
		p.After = page.Next
		if _, err := r.AppendMessages(ctx, sessions[i%4], textMsg(fmt.Sprintf("late%d", i), repo.RoleUser, "needle needle late")); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range key(full) {
		if seen[k] != 1 {
			t.Errorf("message %s seen %d times in a walk with appends", k, seen[k])
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("message %s seen %d times", k, n)
		}
	}
	// Cursors are bound to their search.
	first := srch(t, r, repo.SearchParams{Query: "needle", Limit: 5})
	for _, bad := range []repo.SearchParams{
		{Query: "filler", After: first.Next},
		{Query: "needle", Roles: []repo.Role{repo.RoleUser}, After: first.Next},
		{Query: "needle", SessionID: &sessions[0], After: first.Next},
		{Query: "needle", After: "not a cursor"},
		{Query: "needle", After: "eyJrIjoic2VhcmNoIn0"},
		{Query: "needle", Limit: -1},
		{Query: "needle", Limit: repo.MaxSearchLimit + 1},
	} {
		if _, err := r.Search(ctx, bad); !isInvalid(err) {
			t.Errorf("search %+v: %v, want ErrInvalidInput", bad, err)
		}
	}
	if page := srch(t, r, repo.SearchParams{Query: "needle", Limit: 5, After: first.Next}); len(page.Hits) != 5 {
		t.Errorf("the cursor's own search: %d hits", len(page.Hits))
	}
}

// testSearchSnippetHighlights: the snippet is plain text from the message
// with every match highlighted; HighlightedSnippet marks them.
func testSearchSnippetHighlights(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	s := repo.NewSession()
	mustSave(t, r, s)
	long := strings.Repeat("lorem ipsum dolor sit amet ", 40) + "the Kangaroo jumped " + strings.Repeat("consectetur adipiscing ", 40)
	if _, err := r.AppendMessages(context.Background(), s.ID,
		textMsg("short", repo.RoleUser, "Where is the kangaroo? The kangaroo is here."),
		textMsg("long", repo.RoleUser, long),
		contentMsg("marks", repo.RoleUser, `"kangaroo \ue000 private \ue001 marks"`)); err != nil {
		t.Fatal(err)
	}
	page := srch(t, r, repo.SearchParams{Query: "kangaroo"})
	if len(page.Hits) != 3 {
		t.Fatalf("%d hits", len(page.Hits))
	}
	for _, hit := range page.Hits {
		if len(hit.Highlights) == 0 {
			t.Errorf("%s: no highlight in %q", hit.MessageID, hit.Snippet)
		}
		prev := 0
		for _, sp := range hit.Highlights {
			if sp.Start < prev || sp.End <= sp.Start || sp.End > len(hit.Snippet) {
				t.Fatalf("%s: bad span %+v in %q", hit.MessageID, sp, hit.Snippet)
			}
			if w := hit.Snippet[sp.Start:sp.End]; !strings.EqualFold(w, "kangaroo") {
				t.Errorf("%s: highlight %q, want kangaroo", hit.MessageID, w)
			}
			prev = sp.End
		}
		if strings.ContainsAny(hit.Snippet, "\ue000\ue001") {
			t.Errorf("%s: marker characters in the snippet %q", hit.MessageID, hit.Snippet)
		}
		switch hit.MessageID {
		case "short":
			if got := hit.HighlightedSnippet("[", "]"); !strings.Contains(got, "[kangaroo]? The [kangaroo]") {
				t.Errorf("short: %q", got)
			}
		case "long":
			if len(hit.Snippet) >= len(long)/2 || !strings.Contains(hit.HighlightedSnippet("<", ">"), "<Kangaroo> jumped") {
				t.Errorf("long: snippet %q is not an excerpt around the match", hit.Snippet)
			}
		}
	}
}

// testSearchIdempotentRetryOneHit: an append retried with the same message
// ids (the first attempt landed) stores, and so finds, each message once.
func testSearchIdempotentRetryOneHit(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	batch := []repo.Message{textMsg("r1", repo.RoleUser, "retry marmalade"), textMsg("r2", repo.RoleAssistant, "more marmalade")}
	for range 3 {
		if _, err := r.AppendMessages(ctx, s.ID, batch...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 1}, batch...); err != nil {
		t.Fatalf("strict retry: %v", err)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "marmalade"}); !slices.Equal(got, ids("r1", "r2")) {
		t.Errorf("after retries: %v", got)
	}
	// A duplicate id with other content is refused and not indexed.
	if _, err := r.AppendMessages(ctx, s.ID, textMsg("r1", repo.RoleUser, "retry quince")); !errors.Is(err, repo.ErrDuplicate) {
		t.Fatalf("duplicate: %v", err)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "quince"}); len(got) != 0 {
		t.Errorf("refused append found: %v", got)
	}
}

// testSearchDeletedSessionsNotFound: deleting a session removes its
// messages from the index, and its children's and forks' (the cascade).
func testSearchDeletedSessionsNotFound(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	parent, keep := repo.NewSession(), repo.NewSession()
	parent.AddMessage(textMsg("p1", repo.RoleUser, "ephemeral pomegranate"))
	keep.AddMessage(textMsg("k1", repo.RoleUser, "lasting pomegranate"))
	mustSave(t, r, parent)
	mustSave(t, r, keep)
	child := repo.NewSession()
	child.ParentID = &parent.ID
	child.AddMessage(textMsg("c1", repo.RoleUser, "child pomegranate"))
	mustSave(t, r, child)
	fork, err := r.Fork(ctx, parent.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	page := srch(t, r, repo.SearchParams{Query: "pomegranate", Limit: repo.MaxSearchLimit})
	if len(page.Hits) != 4 {
		t.Fatalf("before delete: %d hits, want 4 (parent, child, fork copy, kept)", len(page.Hits))
	}
	if ok, err := r.Delete(ctx, parent.ID); !ok || err != nil {
		t.Fatalf("delete: %v, %v", ok, err)
	}
	page = srch(t, r, repo.SearchParams{Query: "pomegranate", Limit: repo.MaxSearchLimit})
	if len(page.Hits) != 1 || page.Hits[0].SessionID != keep.ID {
		t.Fatalf("after delete: %+v (fork %s)", page.Hits, fork.ID)
	}
	// New messages of the surviving session are still indexed.
	if _, err := r.AppendMessages(ctx, keep.ID, textMsg("k2", repo.RoleUser, "fresh pomegranate")); err != nil {
		t.Fatal(err)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "pomegranate"}); !slices.Equal(got, ids("k1", "k2")) {
		t.Errorf("after a new append: %v", got)
	}
}

// testSearchBranchesAndForks: messages of every branch are found: the
// continuation a Rewind left, the edited message and its sibling, and the
// copies a Fork made (under the fork's session).
func testSearchBranchesAndForks(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	if _, err := r.AppendMessages(ctx, s.ID, textMsg("u1", repo.RoleUser, "write about volcanoes"),
		textMsg("a1", repo.RoleAssistant, "volcanoes erupt lava")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Rewind(ctx, s.ID, "u1", repo.RewindOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AppendMessages(ctx, s.ID, textMsg("a1b", repo.RoleAssistant, "volcanoes sleep under glaciers")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "u1"},
		textMsg("u1e", repo.RoleUser, "write about glaciers instead")); err != nil {
		t.Fatal(err)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "volcanoes"}); !slices.Equal(got, ids("u1", "a1", "a1b")) {
		t.Errorf("volcanoes: %v", got)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "glaciers"}); !slices.Equal(got, ids("a1b", "u1e")) {
		t.Errorf("glaciers: %v", got)
	}
	fork, err := r.Fork(ctx, s.ID, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "lava", SessionID: &fork.ID}); !slices.Equal(got, ids("a1")) {
		t.Errorf("the fork's copy of a1: %v", got)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "lava"}); !slices.Equal(got, ids("a1", "a1")) {
		t.Errorf("lava in the origin and the fork: %v", got)
	}
}

// testSearchConcurrentAppendsIndexed: messages appended concurrently (one
// session: group commit; several: parallel writers) and through Save are
// all found, once each.
func testSearchConcurrentAppendsIndexed(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s1, s2 := repo.NewSession(), repo.NewSession()
	s2.AddMessage(textMsg("saved", repo.RoleUser, "saved quokka"))
	mustSave(t, r, s1)
	mustSave(t, r, s2)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sid := s1.ID
			if i%2 == 1 {
				sid = s2.ID
			}
			_, err := r.AppendMessages(ctx, sid, textMsg(fmt.Sprintf("c%02d", i), repo.RoleUser, fmt.Sprintf("concurrent quokka %d", i)))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	hits := srchAll(t, r, repo.SearchParams{Query: "quokka"}, 9)
	if len(hits) != 41 {
		t.Fatalf("%d hits, want 41", len(hits))
	}
	seen := map[string]bool{}
	for _, h := range hits {
		k := h.SessionID.String() + "/" + h.MessageID
		if seen[k] {
			t.Fatalf("%s found twice", k)
		}
		seen[k] = true
	}
}

// testSearchHostileInputs: no query text is ever query syntax or a
// database error: operators, quotes, parentheses, NEAR, column filters,
// SQL, unicode each either search for their words or, when they hold no
// word (or break a limit), are ErrInvalidInput before any SQL.
func testSearchHostileInputs(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.AddMessage(textMsg("m", repo.RoleUser, "naïve café 日本語 über straße don't stop body"))
	mustSave(t, r, s)
	invalid := []string{"", "   ", "\t\n", `"`, `""`, `" "`, "*", "**", "-", "()", "(", ")", ":", "^", "'", "''", "\\", "%", "_",
		"\x00", "a\x00b", "\xff", "caf\xc3", strings.Repeat("a ", repo.MaxSearchTerms+1), strings.Repeat("x", repo.MaxSearchQueryLen+1),
		"\u0301", "🙂", "— … ·", "?", "$$", "\ue000"}
	valid := []string{"AND", "OR", "NOT", "NEAR", "a OR b", "NOT x", "foo AND", "NEAR(a b)", "NEAR/2", "a NEAR b", `"unterminated phrase`,
		`foo"bar`, `"a" "b" "`, "col:foo", "body:stop", "{a b}", "-foo", "foo -bar", "+foo", "foo^2", "^foo", "foo*bar", "*foo", "fo*o*",
		"'; DROP TABLE x; --", "') OR 1=1 --", "$1", "x::tsvector", "a & b | !c <-> d", "a:* & b", "\\x27", "%s%d",
		"naïve", "CAFE", "日本語", "straße", "über*", "don't", "STOP", "body", "a\ue001b", strings.Repeat("a ", repo.MaxSearchTerms)}
	for _, q := range invalid {
		_, err := r.Search(ctx, repo.SearchParams{Query: q})
		if !isInvalid(err) {
			t.Errorf("query %q: %v, want ErrInvalidInput", q, err)
		}
	}
	for _, q := range valid {
		if _, err := r.Search(ctx, repo.SearchParams{Query: q}); err != nil {
			t.Errorf("query %q: %v", q, err)
		}
	}
	for _, c := range []struct {
		q    string
		want []string
	}{
		{"don't stop", ids("m")}, {"STOP", ids("m")}, {"naïve", ids("m")}, {"über*", ids("m")}, {"body", ids("m")},
		{"stop:body", ids("m")}, {"body:stop", ids()}, {"NEAR(body stop)", ids()},
	} {
		if got := srchIDs(t, r, repo.SearchParams{Query: c.q}); !slices.Equal(got, c.want) {
			t.Errorf("query %q = %v, want %v", c.q, got, c.want)
		}
	}
	// Hostile filters.
	bad := "t\x00"
	for _, p := range []repo.SearchParams{
		{Query: "stop", TenantID: &bad},
		{Query: "stop", Roles: []repo.Role{"user'; --"}},
		{Query: "stop", After: "\x00"},
	} {
		if _, err := r.Search(ctx, p); !isInvalid(err) {
			t.Errorf("search %+v: %v, want ErrInvalidInput", p, err)
		}
	}
}

// testSearchLargeMessage: a message far larger than a database's text
// search limits (PostgreSQL: a tsvector of at most 1 MB) is stored and
// its beginning found: the indexed text is cut at 100,000 characters.
func testSearchLargeMessage(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	s := repo.NewSession()
	mustSave(t, r, s)
	var b strings.Builder
	for i := 0; b.Len() < 3<<20; i++ {
		fmt.Fprintf(&b, "w%07d ", i) // 3 MB of distinct words
	}
	if _, err := r.AppendMessages(context.Background(), s.ID, textMsg("big", repo.RoleTool, b.String()),
		textMsg("small", repo.RoleUser, "w0000001 again")); err != nil {
		t.Fatalf("append a 3 MB message: %v", err)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "w0000001"}); !slices.Equal(got, ids("big", "small")) {
		t.Errorf("w0000001: %v", got)
	}
	if got := srchIDs(t, r, repo.SearchParams{Query: "w0300000"}); len(got) != 0 {
		t.Errorf("a word after 100,000 characters was indexed: %v", got)
	}
}
