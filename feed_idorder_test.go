package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// feedAll reads every change of st's feed after cursor, page by page.
func feedAll(t *testing.T, st *agentstore.Store, after repo.ChangeCursor) []repo.Change {
	t.Helper()
	var out []repo.Change
	for {
		page, err := st.ChangeFeed().Changes(context.Background(), repo.ChangesParams{After: after, Limit: 7})
		if err != nil {
			t.Fatalf("Changes after %q: %v", after, err)
		}
		out = append(out, page.Changes...)
		if len(page.Changes) == 0 {
			return out
		}
		after = page.Next
	}
}

// feedWrites makes a few changes of every kind through st: a session
// created and appended to, a queue item enqueued, dequeued and completed.
func feedWrites(t *testing.T, st *agentstore.Store) {
	t.Helper()
	ctx := context.Background()
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`"hi"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SessionQueue().Enqueue(ctx, s.ID, "job", 0); err != nil {
		t.Fatal(err)
	}
	it, err := st.SessionQueue().Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
	if err != nil || it == nil {
		t.Fatalf("Dequeue: %v, %v", it, err)
	}
	if err := st.SessionQueue().Complete(ctx, it.Lease()); err != nil {
		t.Fatal(err)
	}
}

// TestFeedIDOrderUpgrade: V19 rebuilds SQLite's change feed table without
// AUTOINCREMENT and without the (ord, id) index. The changes written
// before keep their cursors (a consumer resumes where it was), changes
// written after sort after every earlier one, and a feed whose newest rows
// were deleted by hand (its old sequence past the largest id) gets a purge
// tombstone at the sequence: later ids lie beyond it, and a consumer behind
// it is told its cursor expired instead of silently missing changes.
func TestFeedIDOrderUpgrade(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, handDeleted := range []bool{false, true} {
		t.Run(fmt.Sprintf("hand_deleted=%v", handDeleted), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, agentstore.SQLite)
			old := h.Open(t, agentstore.WithTablePrefix("fx_"))
			if err := old.MigrateTo(ctx, 18); err != nil {
				t.Fatal(err)
			}
			feedWrites(t, old)
			before := feedAll(t, old, "")
			if len(before) < 5 {
				t.Fatalf("%d changes before the upgrade, want at least 5", len(before))
			}
			mid := before[2].Cursor
			ct := quote(old, models.TableSessionChanges)
			if handDeleted {
				if _, err := old.SQLDB().ExecContext(ctx, "DELETE FROM "+ct+" WHERE id = (SELECT MAX(id) FROM "+ct+")"); err != nil {
					t.Fatal(err)
				}
				before = before[:len(before)-1]
			}
			st := h.Open(t, agentstore.WithTablePrefix("fx_"))
			if err := st.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			var ddl string
			if err := st.SQLDB().QueryRowContext(ctx, "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", st.Table(models.TableSessionChanges)).Scan(&ddl); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(strings.ToUpper(ddl), "AUTOINCREMENT") {
				t.Errorf("the feed table still has AUTOINCREMENT: %s", ddl)
			}
			var ordIdx int
			if err := st.SQLDB().QueryRowContext(ctx, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql LIKE '%(\"ord\",\"id\")'", st.Table(models.TableSessionChanges)).Scan(&ordIdx); err != nil || ordIdx != 0 {
				t.Errorf("the feed's (ord, id) index: %d (%v), want none", ordIdx, err)
			}

			// resume is where a consumer that had read every change before
			// the upgrade goes on from.
			resume := before[len(before)-1].Cursor
			if handDeleted {
				// Behind the lost row: told, not silently skipped, and
				// told where to resume.
				want := fmt.Sprintf("c1.0.%d", cursorID(t, resume)+1)
				for _, c := range []repo.ChangeCursor{mid, resume} {
					_, err := st.ChangeFeed().Changes(ctx, repo.ChangesParams{After: c})
					var ce *repo.CursorExpiredError
					if !errors.Is(err, repo.ErrCursorExpired) || !errors.As(err, &ce) {
						t.Fatalf("Changes after %s, behind a row deleted by hand: %v, want ErrCursorExpired", c, err)
					}
					if string(ce.Horizon) != want {
						t.Fatalf("horizon %s, want the deleted row's position %s", ce.Horizon, want)
					}
				}
				resume = repo.ChangeCursor(want)
			} else {
				after := feedAll(t, st, "")
				if len(after) != len(before) {
					t.Fatalf("%d changes after the upgrade, %d before", len(after), len(before))
				}
				for i := range before {
					if after[i].Cursor != before[i].Cursor || after[i].Kind != before[i].Kind || after[i].SessionID != before[i].SessionID ||
						after[i].State != before[i].State || after[i].ItemID != before[i].ItemID || !after[i].Time.Equal(before[i].Time) {
						t.Fatalf("change %d: %+v after the upgrade, %+v before", i, after[i], before[i])
					}
				}
				resumed := feedAll(t, st, mid)
				if len(resumed) != len(before)-3 || resumed[0].Cursor != before[3].Cursor {
					t.Fatalf("resumed after %s: %d changes, want %d from %s", mid, len(resumed), len(before)-3, before[3].Cursor)
				}
			}

			// New changes come after every earlier cursor, the hand-deleted
			// row's included (its id is not reused).
			feedWrites(t, st)
			var maxID int64
			if err := st.SQLDB().QueryRowContext(ctx, "SELECT MAX(id) FROM "+ct+" WHERE kind <> 'feed.purged'").Scan(&maxID); err != nil {
				t.Fatal(err)
			}
			next := feedAll(t, st, resume)
			if len(next) < 5 || string(next[len(next)-1].Cursor) != fmt.Sprintf("c1.0.%d", maxID) ||
				cursorID(t, next[0].Cursor) <= cursorID(t, resume) {
				t.Fatalf("after the upgrade, from %s: %d new changes %v, want at least 5 after it ending at id %d", resume, len(next), next, maxID)
			}
		})
	}
}

// TestFeedIDOrderPlans: on SQLite the feed's reads and purge walk the
// primary key (or the session index) in order: no statement sorts the
// table (USE TEMP B-TREE FOR ORDER BY), and a read after a cursor is a
// SEARCH of the rowid range, not a SCAN.
func TestFeedIDOrderPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, agentstore.SQLite)
	st := h.New(t)
	feedWrites(t, st)
	all := feedAll(t, st, "")
	var c stmtCapture
	c.install(t, st)
	tenant := "acme"
	calls := map[string]func(){
		"read after a cursor": func() {
			if _, err := st.ChangeFeed().Changes(ctx, repo.ChangesParams{After: all[1].Cursor}); err != nil {
				t.Fatal(err)
			}
		},
		"read of one session": func() {
			if _, err := st.ChangeFeed().Changes(ctx, repo.ChangesParams{After: all[1].Cursor, SessionID: all[0].SessionID}); err != nil {
				t.Fatal(err)
			}
		},
		"read of a tenant": func() {
			if _, err := st.ChangeFeed().Changes(ctx, repo.ChangesParams{After: all[1].Cursor, TenantID: &tenant}); err != nil {
				t.Fatal(err)
			}
		},
		"purge": func() {
			if _, err := st.ChangeFeed().PurgeChanges(ctx, time.Hour, 100); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, call := range calls {
		stmts := c.run(call)
		checked := 0
		for _, s := range stmts {
			verb, _, _ := strings.Cut(strings.ToUpper(strings.TrimSpace(s.sql)), " ")
			if !strings.Contains(s.sql, st.Table(models.TableSessionChanges)) || (verb != "SELECT" && verb != "DELETE") {
				continue
			}
			checked++
			plan := sqlitePlan(t, st, s)
			if strings.Contains(plan, "TEMP B-TREE") {
				t.Errorf("%s sorts:\n%s\nplan:\n%s", name, s.sql, plan)
			}
			if name != "purge" && name != "read of a tenant" && strings.Contains(plan, "SCAN ") {
				t.Errorf("%s scans:\n%s\nplan:\n%s", name, s.sql, plan)
			}
		}
		if checked == 0 {
			t.Errorf("%s: no SELECT or DELETE of the feed captured (%d statements)", name, len(stmts))
		}
	}
}

// TestFeedIDOrderVerifyFix: on SQLite, Verify's fix for a missing change
// feed table is the table V19 makes (no AUTOINCREMENT, no (ord, id)
// index), and after running it Verify reports nothing.
func TestFeedIDOrderVerifyFix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, agentstore.SQLite)
	st := h.New(t)
	ct := quote(st, models.TableSessionChanges)
	if _, err := st.SQLDB().ExecContext(ctx, "DROP TABLE "+ct); err != nil {
		t.Fatal(err)
	}
	rep, err := st.Verify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var fix string
	for _, i := range rep.Issues {
		if i.Kind == agentstore.IssueMissingTable && i.Table == st.Table(models.TableSessionChanges) {
			fix = i.Fix
		}
	}
	if fix == "" {
		t.Fatalf("Verify does not report the missing feed table with a fix: %v", rep.Issues)
	}
	if strings.Contains(strings.ToUpper(fix), "AUTOINCREMENT") || strings.Contains(fix, `("ord","id")`) {
		t.Fatalf("the fix is not V19's table:\n%s", fix)
	}
	if _, err := st.SQLDB().ExecContext(ctx, fix); err != nil {
		t.Fatalf("run the fix: %v\n%s", err, fix)
	}
	if rep, err := st.Verify(ctx); err != nil || !rep.OK() {
		t.Fatalf("after the fix: %v, %v", rep, err)
	}
}
