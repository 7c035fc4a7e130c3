package agentstoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// sessionsPagingTests are the Sessions area's tests of this file.
func sessionsPagingTests() []test {
	return tests(
		test{"SessionsPaging", testSessionsPaging},
		test{"SessionsListWalksPastCorruptRows", testSessionsListWalksPastCorruptRows},
	)
}

// walkPages calls page from the first cursor until the next cursor is "",
// checking each page holds at most limit rows and only the last may be
// short, and returns the concatenation.
func walkPages[T any](t *testing.T, limit int, page func(repo.PageParams) ([]T, string, error)) []T {
	t.Helper()
	var all []T
	after := ""
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("paging does not end")
		}
		rows, next, err := page(repo.PageParams{Limit: limit, After: after})
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if len(rows) > limit {
			t.Fatalf("page %d has %d rows, limit %d", i, len(rows), limit)
		}
		all = append(all, rows...)
		if next == "" {
			return all
		}
		if len(rows) < limit {
			t.Fatalf("page %d has %d rows and a next cursor", i, len(rows))
		}
		after = next
	}
}

// testSessionsPaging: ListChildrenPage, GetSummariesPage, PlansPage and
// PendingQueuePage walked at several page sizes (rows with equal
// timestamps and priorities included) return exactly the rows of
// ListChildren, GetSummaries, Plans and PendingQueue, in the same order,
// each once; a tenant view pages only its tenant's children; a bad limit,
// a malformed cursor or a cursor of another call is ErrInvalidInput; an
// unknown session is ErrNotFound (an empty page for children).
func testSessionsPaging(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	parent := repo.NewSession()
	parent.TenantID = "acme"
	mustSave(t, r, parent)
	for i := 0; i < 23; i++ {
		c := repo.NewSession()
		c.ParentID = &parent.ID
		c.TenantID = "acme"
		if i == 7 {
			c.TenantID = "other"
		}
		mustSave(t, r, c)
		if i%3 == 0 { // runs of equal created_at: the id breaks the ties
			clock.Advance(time.Millisecond)
		}
	}
	for i := 0; i < 11; i++ {
		if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: parent.ID, Summary: fmt.Sprintf("s%d", i)}); err != nil {
			t.Fatal(err)
		}
		if i%4 == 0 {
			clock.Advance(time.Millisecond)
		}
	}
	for i := 0; i < 7; i++ { // each new plan cancels the previous one
		s := mustLoad(t, r, parent.ID)
		s.EnterPlanMode(fmt.Sprintf("plan %d", i), "1. x", clock.Now())
		mustSave(t, r, s)
		if i%2 == 0 {
			clock.Advance(time.Millisecond)
		}
	}
	for i, p := range []int32{0, 5, 0, 5, 1, 1, 9, 0, 5, 2, 0, 0, 5, -3, 1, 9, 0} {
		if _, err := q.Enqueue(ctx, parent.ID, fmt.Sprintf("item-%d", i), p); err != nil {
			t.Fatal(err)
		}
	}
	// Two items processing (the two priority-9 ones): not pending, not paged.
	for i := 0; i < 2; i++ {
		if it, err := q.Dequeue(ctx, parent.ID, repo.DequeueParams{}); err != nil || it == nil {
			t.Fatal(err)
		}
	}

	children, err := r.ListChildren(ctx, parent.ID)
	if err != nil || len(children) != 23 {
		t.Fatalf("ListChildren = %d, %v", len(children), err)
	}
	summaries, err := r.GetSummaries(ctx, parent.ID)
	if err != nil || len(summaries) != 11 {
		t.Fatalf("GetSummaries = %d, %v", len(summaries), err)
	}
	plans, err := r.Plans(ctx, parent.ID)
	if err != nil || len(plans) != 7 {
		t.Fatalf("Plans = %d, %v", len(plans), err)
	}
	pending, err := q.PendingQueue(ctx, parent.ID)
	if err != nil || len(pending) != 15 {
		t.Fatalf("PendingQueue = %d, %v", len(pending), err)
	}
	ids := func(n int, id func(int) uuid.UUID) []uuid.UUID {
		out := make([]uuid.UUID, n)
		for i := range out {
			out[i] = id(i)
		}
		return out
	}
	for _, limit := range []int{1, 2, 5, 7, 15, 23, 100} {
		got := walkPages(t, limit, func(p repo.PageParams) ([]uuid.UUID, string, error) {
			return r.ListChildrenPage(ctx, parent.ID, p)
		})
		if !slices.Equal(got, children) {
			t.Fatalf("limit %d: ListChildrenPage walk = %v, want %v", limit, got, children)
		}
		gs := walkPages(t, limit, func(p repo.PageParams) ([]repo.SummarySnapshot, string, error) {
			return r.GetSummariesPage(ctx, parent.ID, p)
		})
		if !slices.Equal(ids(len(gs), func(i int) uuid.UUID { return gs[i].ID }),
			ids(len(summaries), func(i int) uuid.UUID { return summaries[i].ID })) {
			t.Fatalf("limit %d: GetSummariesPage walk differs from GetSummaries", limit)
		}
		gp := walkPages(t, limit, func(p repo.PageParams) ([]repo.Plan, string, error) {
			return r.PlansPage(ctx, parent.ID, p)
		})
		if !slices.Equal(ids(len(gp), func(i int) uuid.UUID { return gp[i].ID }),
			ids(len(plans), func(i int) uuid.UUID { return plans[i].ID })) {
			t.Fatalf("limit %d: PlansPage walk differs from Plans", limit)
		}
		gq := walkPages(t, limit, func(p repo.PageParams) ([]repo.QueueItem, string, error) {
			return q.PendingQueuePage(ctx, parent.ID, p)
		})
		if !slices.Equal(ids(len(gq), func(i int) uuid.UUID { return gq[i].ID }),
			ids(len(pending), func(i int) uuid.UUID { return pending[i].ID })) {
			t.Fatalf("limit %d: PendingQueuePage walk differs from PendingQueue", limit)
		}
	}
	// The default limit takes everything here in one page.
	if got, next, err := r.ListChildrenPage(ctx, parent.ID, repo.PageParams{}); err != nil || next != "" || len(got) != 23 {
		t.Fatalf("default page: %d rows, next %q, %v", len(got), next, err)
	}
	// A tenant view pages its tenant's children only.
	tv := st.ForTenant("acme").Sessions()
	got := walkPages(t, 4, func(p repo.PageParams) ([]uuid.UUID, string, error) {
		return tv.ListChildrenPage(ctx, parent.ID, p)
	})
	if len(got) != 22 || slices.Contains(got, children[7]) {
		t.Fatalf("tenant view paged %d children (want 22, without the other tenant's)", len(got))
	}

	// Refused input.
	_, sumNext, err := r.GetSummariesPage(ctx, parent.ID, repo.PageParams{Limit: 2})
	if err != nil || sumNext == "" {
		t.Fatalf("summaries page: %q %v", sumNext, err)
	}
	for _, p := range []repo.PageParams{{Limit: -1}, {Limit: repo.MaxPageLimit + 1}, {After: "not a cursor!"}, {After: "e30"}, {After: sumNext}} {
		if _, _, err := r.ListChildrenPage(ctx, parent.ID, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("ListChildrenPage(%+v) = %v, want ErrInvalidInput", p, err)
		}
		if _, _, err := q.PendingQueuePage(ctx, parent.ID, p); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("PendingQueuePage(%+v) = %v, want ErrInvalidInput", p, err)
		}
	}
	if _, _, err := r.PlansPage(ctx, parent.ID, repo.PageParams{After: sumNext}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("PlansPage with a summaries cursor = %v, want ErrInvalidInput", err)
	}
	// Unknown sessions.
	unknown := uuid.New()
	if got, next, err := r.ListChildrenPage(ctx, unknown, repo.PageParams{}); err != nil || len(got) != 0 || next != "" {
		t.Fatalf("children of an unknown parent: %v %q %v", got, next, err)
	}
	if _, _, err := r.GetSummariesPage(ctx, unknown, repo.PageParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("GetSummariesPage(unknown) = %v", err)
	}
	if _, _, err := r.PlansPage(ctx, unknown, repo.PageParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("PlansPage(unknown) = %v", err)
	}
	if _, _, err := q.PendingQueuePage(ctx, unknown, repo.PageParams{}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("PendingQueuePage(unknown) = %v", err)
	}
}

// listWalk walks List from the first page at limit in order and returns
// the ids of every row (sessions and corrupt rows, in the order of the
// walk), the ids of the corrupt rows, and the number of pages. Each page
// must hold at most limit rows (more only for a run of rows whose order
// key cannot be read), and a page with corrupt rows must come with an
// error matching ErrCorruptRow (a *repo.Error naming list_sessions, never
// ErrInvalidInput) that names each of them; a page without, with none.
func listWalk(t *testing.T, r repo.Sessions, order repo.ListOrder, limit int, keyless map[uuid.UUID]bool) (all, corrupt []uuid.UUID, pages int) {
	t.Helper()
	var after *repo.Cursor
	for {
		if pages++; pages > 1000 {
			t.Fatal("List paging does not end")
		}
		page, err := r.List(context.Background(), repo.ListParams{Order: order, Limit: limit, After: after})
		rows := len(page.Sessions) + len(page.Corrupt)
		extra := 0
		for _, c := range page.Corrupt {
			if keyless[uuid.MustParse(c.RowID)] {
				extra++
			}
		}
		if rows > limit+extra {
			t.Fatalf("%s limit %d: page %d has %d rows", order, limit, pages, rows)
		}
		if len(page.Corrupt) == 0 {
			if err != nil {
				t.Fatalf("%s limit %d: page %d: %v", order, limit, pages, err)
			}
		} else {
			var re *repo.Error
			var ce *agentstore.CorruptRowError
			if !errors.Is(err, agentstore.ErrCorruptRow) || !errors.As(err, &re) || re.Op != "list_sessions" || !errors.As(err, &ce) ||
				errors.Is(err, agentstore.ErrInvalidInput) {
				t.Fatalf("%s limit %d: page %d with corrupt rows: error %v, want a *repo.Error matching ErrCorruptRow", order, limit, pages, err)
			}
			if ce.RowID != page.Corrupt[0].RowID {
				t.Fatalf("errors.As finds corrupt row %s, the page lists %s first", ce.RowID, page.Corrupt[0].RowID)
			}
		}
		// Rows in the walk's order: merge Sessions and Corrupt by the order
		// the database gives (the ids of the stored order, see the caller).
		ids := make([]uuid.UUID, 0, rows)
		for _, s := range page.Sessions {
			ids = append(ids, s.ID)
		}
		for _, c := range page.Corrupt {
			id := uuid.MustParse(c.RowID)
			if err == nil || !strings.Contains(err.Error(), c.RowID) {
				t.Fatalf("the page's error does not name corrupt row %s: %v", c.RowID, err)
			}
			ids = append(ids, id)
			corrupt = append(corrupt, id)
		}
		all = append(all, ids...)
		if page.Next == nil {
			return all, corrupt, pages
		}
		if rows == 0 {
			t.Fatalf("%s limit %d: page %d is empty but has a next cursor", order, limit, pages)
		}
		after = page.Next
	}
}

// testSessionsListWalksPastCorruptRows: a keyset walk of List meets
// sessions whose state or kind cannot be decoded — first, in the middle
// and last of a page, and as the very last row — and still reaches every
// row: each page returns its decodable sessions, lists its corrupt rows
// in ListPage.Corrupt (table, id, column) with an error matching
// ErrCorruptRow, and a Next cursor past them; at every page size, in both
// orders, every row appears exactly once and none is deleted. Where the
// database can hold it (DatabaseOps.UnreadableTimestamp: SQLite) a row
// whose order timestamp itself does not read (text edited by hand) is
// passed too.
func testSessionsListWalksPastCorruptRows(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	var ids []uuid.UUID // creation order = updated order
	for range 12 {
		s := repo.NewSession()
		mustSave(t, r, s)
		ids = append(ids, s.ID)
		clock.Advance(time.Millisecond)
	}
	// white-box: plant values the API refuses to write. With pages of 4:
	// rows 0 and 3 are first and last of page 1, row 5 the middle of page
	// 2, row 8 first of page 3 and row 11 the last row of all.
	bad := map[uuid.UUID]string{ids[0]: "state", ids[3]: "session_type", ids[5]: "state", ids[8]: "state", ids[11]: "session_type"}
	for id, col := range bad {
		if col == "state" {
			h.update(t, st, models.TableSessions, Row{"id": id}, Row{"state": "hibernating"})
		} else {
			h.update(t, st, models.TableSessions, Row{"id": id}, Row{"session_type": "robot"})
		}
	}
	keyless := map[uuid.UUID]bool{}
	// Row 6's updated_at no longer reads as a timestamp but keeps its
	// place in the order (the stored text with a suffix), where the
	// database can hold that.
	if ok, err := h.ops(t).UnreadableTimestamp(ctx, st, models.TableSessions, Row{"id": ids[6]}, "updated_at"); err != nil {
		t.Fatalf("unreadable updated_at: %v", err)
	} else if ok {
		bad[ids[6]] = "updated_at"
		keyless[ids[6]] = true
	}
	check := func(order repo.ListOrder, limit int) {
		t.Helper()
		all, corrupt, pages := listWalk(t, r, order, limit, keyless)
		got := map[uuid.UUID]int{}
		for _, id := range all {
			got[id]++
		}
		for _, id := range ids {
			if got[id] != 1 {
				t.Fatalf("%s limit %d: session %s listed %d times, want once (walk: %v)", order, limit, id, got[id], all)
			}
		}
		if len(all) != len(ids) || len(corrupt) != len(bad) {
			t.Fatalf("%s limit %d: %d rows (%d corrupt), want %d (%d corrupt)", order, limit, len(all), len(corrupt), len(ids), len(bad))
		}
		for _, id := range corrupt {
			if bad[id] == "" {
				t.Fatalf("%s limit %d: %s reported corrupt", order, limit, id)
			}
		}
		if len(keyless) == 0 && limit == 4 && pages != 3 {
			t.Fatalf("%s limit 4: %d pages, want 3", order, pages)
		}
		// The sessions come in the order's sequence.
		var seq []uuid.UUID
		for _, id := range all {
			if bad[id] == "" {
				seq = append(seq, id)
			}
		}
		var want []uuid.UUID
		for _, id := range ids {
			if bad[id] == "" {
				want = append(want, id)
			}
		}
		if !slices.Equal(seq, want) {
			t.Fatalf("%s limit %d: sessions in the walk %v, want %v", order, limit, seq, want)
		}
	}
	for _, order := range []repo.ListOrder{repo.OrderUpdated, repo.OrderCreated} {
		for _, limit := range []int{1, 2, 3, 4, 5, 12, 100} {
			check(order, limit)
		}
	}
	// The first page of 4 holds two corrupt rows, named with their columns.
	page, err := r.List(ctx, repo.ListParams{Order: repo.OrderCreated, Limit: 4})
	if len(page.Sessions) != 2 || len(page.Corrupt) != 2 || page.Next == nil || page.Next.ID != ids[3] {
		t.Fatalf("first page: %d sessions, %d corrupt, next %+v; want 2, 2 and a cursor at row 3", len(page.Sessions), len(page.Corrupt), page.Next)
	}
	for i, want := range []uuid.UUID{ids[0], ids[3]} {
		c := page.Corrupt[i]
		if c.Table != "sessions" || c.RowID != want.String() || c.Column != bad[want] {
			t.Fatalf("corrupt row %d = %s/%s/%s, want sessions/%s/%s", i, c.Table, c.RowID, c.Column, want, bad[want])
		}
	}
	if !strings.Contains(err.Error(), "hibernating") || !strings.Contains(err.Error(), "robot") {
		t.Fatalf("the error does not show the stored values: %v", err)
	}
	if n := h.count(t, st, models.TableSessions, nil); n != 12 {
		t.Fatalf("%d sessions stored after the walks, want 12: nothing deleted", n)
	}
}
