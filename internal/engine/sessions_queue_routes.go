package engine

import (
	"math"
	"sync"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/repo"
)

// leaseRoutesMax bounds a Store's leaseRoutes (entries; about 100 bytes
// each).
const leaseRoutesMax = 1 << 16

// leaseRoutes remembers, on the Citus route only (docs/distributed.md),
// the session of each lease this Store's Dequeue handed out, so that
// Complete, Fail and Release of a lease built from an item id and token
// alone (Lease.SessionID uuid.Nil) still pin the statement to the item's
// session, the queue's distribution column, instead of sending it to
// every shard. A lease this Store did not hand out (another Store or
// process, one forgotten at the bound) is found by id alone, as before:
// the memory changes which statement is sent, never the outcome (a token
// names one item of one session). An entry goes when its lease ends
// through this Store, or, once the memory is full, when its lease has run
// out; a lease that finds the memory full of live leases is not
// remembered.
type leaseRoutes struct {
	mu  sync.Mutex
	m   map[leaseKey]leaseRoute
	max int // leaseRoutesMax; smaller in tests
	// sweepAt: when the memory is full, no sweep before this time (ms):
	// just after the earliest end of the leases remembered (0 before the
	// first sweep), so a full memory of live leases is not walked on
	// every Dequeue
	sweepAt int64
}

// leaseKey identifies a lease: its item and token.
type leaseKey struct{ item, token uuid.UUID }

// leaseRoute is a remembered lease's session and lease end (ms).
type leaseRoute struct {
	session uuid.UUID
	untilMS int64
}

// rememberLease records the session of item it, just dequeued, under its
// lease (item and token), when the Store runs the Citus route.
func (s *Store) rememberLease(it *repo.QueueItem, nowMS int64) {
	if !s.citusRoute() || it == nil || it.LeaseToken == nil || it.LeasedUntil == nil {
		return
	}
	r := &s.leaseRoutes
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[leaseKey]leaseRoute{}
	}
	if r.max == 0 {
		r.max = leaseRoutesMax
	}
	if len(r.m) >= r.max {
		if nowMS < r.sweepAt {
			return // full of leases that had not run out at the last sweep
		}
		r.sweepAt = math.MaxInt64
		for k, v := range r.m {
			if v.untilMS < nowMS {
				delete(r.m, k)
			} else {
				r.sweepAt = min(r.sweepAt, v.untilMS+1)
			}
		}
		if len(r.m) >= r.max {
			return
		}
	}
	until := it.LeasedUntil.UnixMilli()
	r.m[leaseKey{it.ID, *it.LeaseToken}] = leaseRoute{session: it.SessionID, untilMS: until}
	r.sweepAt = min(r.sweepAt, until+1) // a lease ending before the kept ones (0: no sweep yet)
}

// routeLease returns l with its session filled in from the memory when l
// names none and this Store handed it out (the Citus route only).
func (s *Store) routeLease(l repo.Lease) repo.Lease {
	if l.SessionID != uuid.Nil || !s.citusRoute() {
		return l
	}
	r := &s.leaseRoutes
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.m[leaseKey{l.ItemID, l.Token}]; ok {
		l.SessionID = v.session
	}
	return l
}

// forgetLease drops l's entry (its lease ended through this Store).
func (s *Store) forgetLease(l repo.Lease) {
	if !s.citusRoute() {
		return
	}
	r := &s.leaseRoutes
	r.mu.Lock()
	delete(r.m, leaseKey{l.ItemID, l.Token})
	r.mu.Unlock()
}
