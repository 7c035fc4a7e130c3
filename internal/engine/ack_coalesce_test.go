package engine

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestWorkerAckCoalesces: concurrent AckWorkItem calls are one flush
// where the dialect coalesces them (SQLite, PostgreSQL), but not on the
// Citus route (PostgreSQL with its fast paths switched off), where each
// ack commits alone, pinned to its item's instance: a flush there deletes
// from several instances' shards in one statement. Every ack lands
// either way.
func TestWorkerAckCoalesces(t *testing.T) {
	ctx := context.Background()
	for name, st := range gcStores(t) {
		t.Run(name, func(t *testing.T) {
			p := st.provider()
			const n = 4
			tokens := make([]string, n)
			for i := range tokens {
				if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "ack-" + strconv.Itoa(i), ExecutionID: 1, ID: 1, Name: "a", Input: "x"}); err != nil {
					t.Fatal(err)
				}
				l, err := p.FetchWorkItem(ctx, time.Hour, 0, nil, duroxide.TagFilter{})
				if err != nil || l == nil {
					t.Fatalf("fetch: %v %v", l, err)
				}
				tokens[i] = l.LockToken
			}
			errs := callsCoalesce(t, &st.gc.ackWork, n, name != "postgres-general", func(i int) error { return p.AckWorkItem(ctx, tokens[i], nil) })
			for i, err := range errs {
				if err != nil {
					t.Fatalf("ack %d: %v", i, err)
				}
			}
			var left int64
			if err := st.db.WithContext(ctx).Raw("SELECT COUNT(*) FROM " + st.quoted(models.TableWorkerQueue)).Scan(&left).Error; err != nil || left != 0 {
				t.Fatalf("%d worker items left after the acks (%v), want 0", left, err)
			}
		})
	}
}
