package engine

import (
	"context"
	"testing"
	"time"

	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestOrchClaimPassesOverInFlightClaims: on PostgreSQL's one-statement
// claim, a fetch that starts while n other claims of its Store are in
// flight (orchClaiming) takes the (n+1)-th eligible instance of the window,
// each instance ranked by its oldest message (an instance with two
// messages counts once), or the last eligible one when there are fewer;
// with none in flight, the oldest. A locked instance is not eligible.
func TestOrchClaimPassesOverInFlightClaims(t *testing.T) {
	st := pgTestStore(t)
	if st == nil {
		t.Skip("PostgreSQL unreachable (CI requires it: AGENTSTORE_REQUIRE_POSTGRES)")
	}
	p := st.provider()
	ctx := context.Background()
	enqueue := func(instances ...string) {
		t.Helper()
		for _, in := range instances {
			if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: in, Orchestration: "o", ExecutionID: 1}, 0); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond) // distinct visible_at
		}
	}
	fetchWith := func(inFlight int64) *duroxide.OrchestrationItem {
		t.Helper()
		p.orchClaiming.Store(inFlight)
		defer p.orchClaiming.Store(0)
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if it == nil {
			t.Fatalf("with %d claims in flight the fetch found nothing", inFlight)
		}
		return it
	}
	// a and b first, then a's second message, then c and d
	enqueue("a", "b")
	if err := p.EnqueueForOrchestrator(ctx, &duroxide.ExternalRaised{Instance: "a", Name: "e", Data: "1"}, 0); err != nil {
		t.Fatal(err)
	}
	enqueue("c", "d")
	for _, c := range []struct {
		inFlight int64
		want     string
	}{{1, "b"}, {2, "d"}, {0, "a"}, {3, "c"}} {
		// b is taken with one claim in flight (a's second message does not
		// make a count twice); then of a, c, d the third (d); then the
		// oldest (a); then, of c alone, c
		it := fetchWith(c.inFlight)
		if it.Instance != c.want {
			t.Fatalf("with %d claims in flight the fetch took %s, want %s", c.inFlight, it.Instance, c.want)
		}
		if c.want == "a" && len(it.Messages) != 2 {
			t.Fatalf("a's batch holds %d messages, want 2", len(it.Messages))
		}
	}
	if p.orchClaiming.Load() != 0 {
		t.Fatalf("orchClaiming is %d after the fetches, want 0", p.orchClaiming.Load())
	}
}
