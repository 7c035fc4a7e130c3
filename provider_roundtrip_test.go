package agentstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestProviderFetchSnapshotOlderThanLock makes the PostgreSQL fetch
// statement take its snapshot before a concurrent "ack" commits and its
// lock after: transaction T deletes the instance's (expired) lock row and
// writes a new instance row version and a history event, the fetch
// starts and waits in its lock upsert for T, then T commits. The fetch
// must return T's event (its snapshot alone would not have it).
func TestProviderFetchSnapshotOlderThanLock(t *testing.T) {
	h := newHarness(t, agentstore.Postgres)
	admin := requirePostgres(t)
	e := newPEnv(t, h)
	e.StartInstance(t, "snap", nil)
	e.Enqueue(t, &duroxide.ExternalRaised{Instance: "snap", Name: "x", Data: "1"})
	now := e.Clock.Now().UnixMilli()
	locks, inst, hist := quote(e.st, models.TableInstanceLocks), quote(e.st, models.TableInstances), quote(e.st, models.TableHistory)
	e.exec(t, "INSERT INTO "+locks+" (instance_id, lock_token, locked_until, locked_at) VALUES ('snap', 'old', ?, ?)", now-1, now-1000)
	ctx := context.Background()
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	data, err := json.Marshal(testkit.Ev("snap", 1, 2, &duroxide.ExternalEventEvent{Name: "late", Data: "ack"}))
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		"DELETE FROM " + locks + " WHERE instance_id = 'snap'",
		fmt.Sprintf("UPDATE %s SET updated_at = %d WHERE instance_id = 'snap'", inst, now),
		fmt.Sprintf("INSERT INTO %s (instance_id, execution_id, event_id, event_type, event_data, created_at) VALUES ('snap', 1, 2, 'ExternalEvent', '%s', %d)",
			hist, strings.ReplaceAll(string(data), "'", "''"), now),
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	type result struct {
		it  *duroxide.OrchestrationItem
		err error
	}
	done := make(chan result, 1)
	go func() {
		it, err := e.P.FetchOrchestrationItem(ctx, testLock, 0, nil)
		done <- result{it, err}
	}()
	// wait until the fetch waits for T's row lock
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := admin.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%"+h.Schema+"%instance_locks%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case r := <-done:
			t.Fatalf("fetch returned before T committed: %v, %v", r.it, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the fetch never waited for T")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.it == nil {
		t.Fatalf("fetch: %v, %v", r.it, r.err)
	}
	if len(r.it.History) != 2 || len(r.it.Messages) != 1 {
		t.Fatalf("fetch returned %d history events (want 2: the one committed while it waited) and %d messages", len(r.it.History), len(r.it.Messages))
	}
	if x, ok := r.it.History[1].Kind.(*duroxide.ExternalEventEvent); !ok || x.Data != "ack" {
		t.Fatalf("history[1] = %#v", r.it.History[1].Kind)
	}
}
