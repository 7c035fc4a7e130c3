package engine

import (
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/repo"
)

// TestLeaseRoutesBounded: the lease memory of the Citus route is bounded:
// once full, a new lease first sweeps the leases that have run out (not
// again before the earliest remembered one ends), and when every
// remembered lease is live it is not remembered (its Complete
// goes by id alone). A remembered lease's session fills an id-only lease;
// an ended one is forgotten. Off the Citus route nothing is remembered.
func TestLeaseRoutesBounded(t *testing.T) {
	st := pgTestStore(t, WithoutCapabilities(CapFastPaths))
	if st == nil {
		t.Skip("PostgreSQL unreachable")
	}
	st.leaseRoutes.max = 2
	now := time.UnixMilli(1_000_000)
	item := func(until time.Time) *repo.QueueItem {
		tok := uuid.New()
		return &repo.QueueItem{ID: uuid.New(), SessionID: uuid.New(), LeaseToken: &tok, LeasedUntil: &until}
	}
	routed := func(it *repo.QueueItem) bool {
		return st.routeLease(repo.Lease{ItemID: it.ID, Token: *it.LeaseToken}).SessionID == it.SessionID
	}
	expired, live := item(now.Add(-time.Second)), item(now.Add(time.Minute))
	st.rememberLease(expired, now.UnixMilli())
	st.rememberLease(live, now.UnixMilli())
	if !routed(expired) || !routed(live) {
		t.Fatal("remembered leases are not routed")
	}
	third := item(now.Add(time.Minute))
	st.rememberLease(third, now.UnixMilli()) // full: the expired one is swept
	if routed(expired) || !routed(live) || !routed(third) {
		t.Fatalf("after the sweep: expired %v live %v third %v; want false true true", routed(expired), routed(live), routed(third))
	}
	fourth := item(now.Add(time.Minute))
	st.rememberLease(fourth, now.UnixMilli()) // full of live leases: not remembered
	if routed(fourth) {
		t.Fatal("a lease was remembered beyond the bound")
	}
	// once the kept leases have run out, the next sweep frees room
	later := now.Add(2 * time.Minute)
	st.rememberLease(fourth, later.UnixMilli())
	if !routed(fourth) || routed(live) {
		t.Fatalf("after the leases ran out: fourth %v live %v; want true false", routed(fourth), routed(live))
	}
	live = item(later.Add(time.Minute))
	st.rememberLease(live, later.UnixMilli())
	st.forgetLease(repo.Lease{ItemID: live.ID, Token: *live.LeaseToken})
	if routed(live) {
		t.Fatal("an ended lease is still remembered")
	}
	// a short lease remembered after a sweep is swept once it ends, before
	// the leases the sweep kept end
	st.leaseRoutes = leaseRoutes{max: 2}
	long1, long2 := item(now.Add(time.Hour)), item(now.Add(time.Hour))
	st.rememberLease(long1, now.UnixMilli())
	st.rememberLease(long2, now.UnixMilli())
	st.rememberLease(item(now.Add(time.Hour)), now.UnixMilli()) // full of live leases: not remembered
	st.forgetLease(repo.Lease{ItemID: long2.ID, Token: *long2.LeaseToken})
	short := item(now.Add(time.Second))
	st.rememberLease(short, now.UnixMilli())
	next := item(now.Add(time.Hour))
	st.rememberLease(next, now.Add(2*time.Second).UnixMilli())
	if !routed(next) || routed(short) || !routed(long1) {
		t.Fatalf("after the short lease ended: next %v short %v long %v; want true false true", routed(next), routed(short), routed(long1))
	}
	// a lease naming its session is left as it is
	other := uuid.New()
	if l := st.routeLease(repo.Lease{ItemID: third.ID, Token: *third.LeaseToken, SessionID: other}); l.SessionID != other {
		t.Fatalf("a lease naming session %s was routed to %s", other, l.SessionID)
	}

	plain := pgTestStore(t)
	plain.rememberLease(third, now.UnixMilli())
	if l := plain.routeLease(repo.Lease{ItemID: third.ID, Token: *third.LeaseToken}); l.SessionID != uuid.Nil || plain.leaseRoutes.m != nil {
		t.Fatal("a Store off the Citus route remembered a lease")
	}
}
