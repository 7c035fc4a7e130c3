package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestCancelledSessionFetchFreesSession: a session-bound FetchWorkItem
// whose context ends after its claim gives back the item and the session
// lease the claim took anew, so another owner takes the item at once
// (before, the session stayed the cancelled owner's for its whole lease,
// a minute here); a lease the owner already held before the cancelled
// fetch is kept (its affinity), and its item comes back to it. Every
// dialect configuration: SQLite, PostgreSQL with and without its fast
// paths (the Citus route's session claim), MariaDB.
func TestCancelledSessionFetchFreesSession(t *testing.T) {
	stores := gcStores(t)
	if st := gcMariaDB(t); st != nil {
		stores["mariadb"] = st
	}
	bg := context.Background()
	for name, st := range stores {
		t.Run(name, func(t *testing.T) {
			p := st.provider()
			enqueue := func(sid string, id uint64) {
				t.Helper()
				if err := p.EnqueueForWorker(bg, &duroxide.ActivityExecute{Instance: "i-" + sid, ExecutionID: 1, ID: id, Name: "a",
					Input: "{}", SessionID: &sid}); err != nil {
					t.Fatal(err)
				}
			}
			cfg := func(owner string) *duroxide.SessionFetchConfig {
				return &duroxide.SessionFetchConfig{OwnerID: owner, LockTimeout: time.Minute}
			}
			fetch := func(owner string) *duroxide.WorkItemLease {
				t.Helper()
				l, err := p.FetchWorkItem(bg, 30*time.Second, 0, cfg(owner), duroxide.TagFilter{})
				if err != nil {
					t.Fatalf("fetch as %s: %v", owner, err)
				}
				return l
			}
			cancelledFetch := func(owner string) {
				t.Helper()
				ctx, cancel := context.WithCancel(bg)
				defer cancel()
				claimed := false
				p.afterWorkClaim = func() { claimed = true; cancel() }
				defer func() { p.afterWorkClaim = nil }()
				l, err := p.FetchWorkItem(ctx, 30*time.Second, 0, cfg(owner), duroxide.TagFilter{})
				if !claimed {
					t.Fatalf("the fetch as %s claimed nothing (%v, %v)", owner, l, err)
				}
				if l != nil || !errors.Is(err, context.Canceled) {
					t.Fatalf("cancelled fetch as %s: %+v, %v; want no lease and context.Canceled", owner, l, err)
				}
			}
			sessionLive := func(sid string) (owner string, live bool) {
				t.Helper()
				var rows []struct {
					WorkerID    string
					LockedUntil int64
				}
				if err := st.db.WithContext(bg).Raw(`SELECT worker_id, locked_until FROM `+p.q(models.TableActivitySessions)+
					` WHERE session_id = ?`, sid).Scan(&rows).Error; err != nil {
					t.Fatal(err)
				}
				if len(rows) == 0 {
					return "", false
				}
				return rows[0].WorkerID, rows[0].LockedUntil > st.nowMS()
			}

			// a session nobody held: the cancelled claim takes it, then
			// gives it back with the item
			enqueue("s1", 1)
			cancelledFetch("A")
			if owner, live := sessionLive("s1"); live {
				t.Fatalf("after A's cancelled fetch session s1 is still %s's", owner)
			}
			l := fetch("B")
			if l == nil {
				t.Fatal("B found nothing: the session (or the item) stayed held after A's cancelled fetch")
			}
			if l.AttemptCount != 1 {
				t.Errorf("B's lease counts %d attempts, want 1 (the cancelled claim's uncounted)", l.AttemptCount)
			}
			if err := p.AckWorkItem(bg, l.LockToken, nil); err != nil {
				t.Fatal(err)
			}
			if owner, live := sessionLive("s1"); !live || owner != "B" {
				t.Fatalf("after B's ack session s1 is %q (live %v), want B's", owner, live)
			}

			// a session the owner already held: a cancelled fetch leaves
			// the owner's lease as it was
			enqueue("s2", 1)
			l = fetch("A")
			if l == nil {
				t.Fatal("A found nothing in s2")
			}
			if err := p.AckWorkItem(bg, l.LockToken, nil); err != nil {
				t.Fatal(err)
			}
			enqueue("s2", 2)
			cancelledFetch("A")
			if owner, live := sessionLive("s2"); !live || owner != "A" {
				t.Fatalf("after A's cancelled fetch of a session it held, s2 is %q (live %v), want A's", owner, live)
			}
			if l := fetch("C"); l != nil {
				t.Fatalf("C took %+v of session s2, which A holds", l.Item)
			}
			if l := fetch("A"); l == nil {
				t.Fatal("A did not get back the item of its session s2")
			}
		})
	}
}
