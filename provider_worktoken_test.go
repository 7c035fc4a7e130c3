package agentstore_test

import (
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestProviderWorkerTokenForgery: worker lease tokens carry the row id
// (the queue has no lock_token index). A token whose id part, stored part
// or format is wrong must match nothing — ErrInvalidLockToken from ack,
// renew and abandon — and must leave the real lease intact.
func TestProviderWorkerTokenForgery(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newPEnv(t, h)
		for id := uint64(1); id <= 2; id++ {
			if err := e.p.EnqueueForWorker(e.ctx, activity("i1", 1, id)); err != nil {
				t.Fatal(err)
			}
		}
		l1 := e.wfetch(t, nil, testLock, nil, repo.TagFilter{})
		l2 := e.wfetch(t, nil, testLock, nil, repo.TagFilter{})
		if l1 == nil || l2 == nil {
			t.Fatal("want two leases")
		}
		dot1, dot2 := strings.LastIndexByte(l1.LockToken, '.'), strings.LastIndexByte(l2.LockToken, '.')
		if dot1 < 0 || dot2 < 0 {
			t.Fatalf("tokens %q %q carry no row id", l1.LockToken, l2.LockToken)
		}
		forged := []string{
			"", ".", "lock_x", "lock_x.", "lock_x.abc", "lock_x.-1", "lock_x.0", "lock_x.99999999999999999999",
			l1.LockToken[:dot1],                       // stored part only
			l1.LockToken[:dot1] + l2.LockToken[dot2:], // l1's secret, l2's row
			l2.LockToken[:dot2] + l1.LockToken[dot1:], // l2's secret, l1's row
			l1.LockToken + "0", l1.LockToken + ".1",   // id altered
			"lock_00000000-0000-0000-0000-000000000000" + l1.LockToken[dot1:],
		}
		for _, tok := range forged {
			wantErr(t, e.p.AckWorkItem(e.ctx, tok, nil), agentstore.ErrInvalidLockToken)
			wantErr(t, e.p.RenewWorkItemLock(e.ctx, tok, time.Second), agentstore.ErrInvalidLockToken)
			wantErr(t, e.p.AbandonWorkItem(e.ctx, tok, 0, false), agentstore.ErrInvalidLockToken)
			wantErr(t, e.p.AckWorkItem(e.ctx, tok, &repo.ActivityCompleted{Instance: "i1", ExecutionID: 1, ID: 1, Result: "r"}),
				agentstore.ErrInvalidLockToken)
		}
		// the real leases are untouched: both renew and ack once
		for _, l := range []*repo.WorkItemLease{l1, l2} {
			if err := e.p.RenewWorkItemLock(e.ctx, l.LockToken, testLock); err != nil {
				t.Fatalf("renew after forgeries: %v", err)
			}
			if err := e.p.AckWorkItem(e.ctx, l.LockToken, nil); err != nil {
				t.Fatalf("ack after forgeries: %v", err)
			}
			wantErr(t, e.p.AckWorkItem(e.ctx, l.LockToken, nil), agentstore.ErrInvalidLockToken)
		}
		if l := e.wfetch(t, nil, testLock, nil, repo.TagFilter{}); l != nil {
			t.Fatalf("queue should be empty, fetched %v", l.Item)
		}
	})
}
