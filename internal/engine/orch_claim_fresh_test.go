//go:build cgo

package engine

import (
	"context"
	"testing"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestPostgresOrchClaimNewInstanceFresh: PostgreSQL's one-statement claim
// hands out a new instance's metadata (none: no instance row, history or
// key-value rows) without the read after the lock, and only when its
// snapshot cannot have missed an ack of the instance. Each case claims
// one named candidate (as the walk does) with the dialect's statement:
//   - a new instance: the claim is fresh, the instance not found;
//   - the instance's previous holder acks (deleting its lock row and its
//     messages, creating the instance row) while the claim waits for that
//     lock row: the snapshot shows the old lock row and a message the
//     claim then cannot take, so the claim is not fresh and the engine
//     reads the instance after the lock;
//   - another transaction holds one of the instance's visible messages
//     (the claim skips it): not fresh.
func TestPostgresOrchClaimNewInstanceFresh(t *testing.T) {
	ctx := context.Background()
	st := pgTestStore(t)
	if st == nil {
		t.Skip("PostgreSQL unreachable (CI requires it: AGENTSTORE_REQUIRE_POSTGRES)")
	}
	p := st.provider()
	stmt, ok := st.d.(dialect.OrchFetchStatement)
	if !ok {
		t.Fatal("the PostgreSQL dialect has no one-statement orchestration claim")
	}
	db := st.db.WithContext(ctx)
	claim := func(instance string) orchClaimed {
		t.Helper()
		cand, cargs := p.orchNamedCandidateSQL(instance)
		now := st.nowMS()
		c, err := p.claimOrchStatement(db, stmt, cand, cargs, newLockToken(), now, now+30_000)
		if err != nil {
			t.Fatalf("claim %s: %v", instance, err)
		}
		if !c.won || len(c.msgs) == 0 {
			t.Fatalf("claim %s: won %v, %d messages; want the instance and its messages", instance, c.won, len(c.msgs))
		}
		return c
	}
	start := func(instance string) {
		t.Helper()
		if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: instance, Orchestration: "o", ExecutionID: 1}, 0); err != nil {
			t.Fatal(err)
		}
	}
	raise := func(instance string) {
		t.Helper()
		if err := p.EnqueueForOrchestrator(ctx, &duroxide.ExternalRaised{Instance: instance, Name: "e", Data: "d"}, 0); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("new", func(t *testing.T) {
		start("fresh-new")
		c := claim("fresh-new")
		if c.meta == nil || c.meta.found || len(c.meta.hist) != 0 || len(c.meta.kv) != 0 {
			t.Fatalf("claim of a new instance: metadata %+v, want fresh and not found", c.meta)
		}
	})

	t.Run("acked while the claim waits", func(t *testing.T) {
		const x = "fresh-acked"
		start(x)
		held, err := p.FetchOrchestrationItem(ctx, 30*time.Second, 0, nil)
		if err != nil || held == nil || held.Instance != x {
			t.Fatalf("first fetch: %v, %v", held, err)
		}
		raise(x) // a message the first holder did not claim
		// the first holder's ack, in a transaction left open: its lock row
		// and its message deleted, the instance row created
		tx := st.db.WithContext(ctx).Begin()
		defer tx.Rollback()
		if err := tx.Exec(`DELETE FROM `+st.quoted(models.TableInstanceLocks)+` WHERE instance_id = ?`, x).Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Exec(`DELETE FROM `+st.quoted(models.TableOrchestratorQueue)+` WHERE instance_id = ? AND lock_token IS NOT NULL`, x).Error; err != nil {
			t.Fatal(err)
		}
		if err := tx.Exec(`INSERT INTO `+st.quoted(models.TableInstances)+` (instance_id, orchestration_name, current_execution_id, created_at, updated_at)`+
			` VALUES (?, 'o', 1, 1, 1)`, x).Error; err != nil {
			t.Fatal(err)
		}
		got := make(chan orchClaimed, 1)
		go func() { got <- claim(x) }() // its snapshot predates the ack; it waits for the lock row
		time.Sleep(300 * time.Millisecond)
		if err := tx.Commit().Error; err != nil {
			t.Fatal(err)
		}
		c := <-got
		if c.meta != nil && !c.meta.found {
			t.Fatalf("the claim reported a new instance after an ack created it: metadata %+v", c.meta)
		}
	})

	t.Run("a visible message held elsewhere", func(t *testing.T) {
		const x = "fresh-held"
		start(x)
		raise(x)
		tx := st.db.WithContext(ctx).Begin()
		defer tx.Rollback()
		var ids []int64
		if err := tx.Raw(`SELECT id FROM `+st.quoted(models.TableOrchestratorQueue)+` WHERE instance_id = ? ORDER BY id DESC LIMIT 1 FOR UPDATE`, x).Scan(&ids).Error; err != nil || len(ids) != 1 {
			t.Fatalf("hold a message: %v %v", ids, err)
		}
		c := claim(x)
		if len(c.msgs) != 1 {
			t.Fatalf("claimed %d messages, want the one not held", len(c.msgs))
		}
		if c.meta != nil {
			t.Fatalf("the claim that skipped a visible message reported fresh metadata %+v", c.meta)
		}
	})
}
