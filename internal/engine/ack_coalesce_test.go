package engine

import (
	"context"
	"strconv"
	"sync"
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
			coalesced := name != "postgres-general"
			c := &st.gc.ackWork
			// pretend a flush is running, so that every coalesced call queues
			c.mu.Lock()
			c.busy++
			c.mu.Unlock()
			before := c.batches.Load()
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, tok := range tokens {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = p.AckWorkItem(ctx, tok, nil)
				}()
			}
			if coalesced {
				deadline := time.Now().Add(10 * time.Second)
				for {
					c.mu.Lock()
					queued := len(c.queue)
					c.mu.Unlock()
					if queued == n {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d of %d acks queued for a flush", queued, n)
					}
					time.Sleep(time.Millisecond)
				}
			} else {
				// each goes its own way: nothing queues, every call returns
				done := make(chan struct{})
				go func() { wg.Wait(); close(done) }()
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					c.mu.Lock()
					queued := len(c.queue)
					c.handOff() // let the queued calls end
					c.mu.Unlock()
					t.Fatalf("acks still waiting after 10 s, %d queued for a flush on the Citus route, want none", queued)
				}
				c.mu.Lock()
				queued := len(c.queue)
				c.mu.Unlock()
				if queued != 0 {
					t.Fatalf("%d acks queued on the Citus route, want none", queued)
				}
			}
			c.mu.Lock()
			c.handOff()
			c.mu.Unlock()
			wg.Wait()
			want := int64(0)
			if coalesced {
				want = 1
			}
			if got := c.batches.Load() - before; got != want {
				t.Fatalf("%d flushes of several acks, want %d", got, want)
			}
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
