package agentstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

func TestProviderErrorContract(t *testing.T) {
	base := errors.New("driver said no")
	pe := &duroxide.ProviderError{Op: "fetch_work_item", Message: "deadlock", Retryable: true, Err: base}
	if pe.Error() != "fetch_work_item: deadlock" || !errors.Is(pe, repo.ErrRetryable) || !errors.Is(pe, base) || !duroxide.IsRetryableProviderError(pe) {
		t.Fatalf("retryable ProviderError: %q", pe.Error())
	}
	if d := duroxide.ToInfrastructureError(pe); d.Infrastructure == nil || d.Infrastructure.Operation != "fetch_work_item" || !d.Infrastructure.Retryable {
		t.Fatalf("infrastructure details = %+v", d)
	}
	perm := &duroxide.ProviderError{Op: "ack", Message: "Invalid lock token", Err: duroxide.ErrInvalidLockToken}
	if errors.Is(perm, repo.ErrRetryable) || duroxide.IsRetryableProviderError(perm) {
		t.Fatalf("permanent error is retryable")
	}
	if !errors.Is(perm, agentstore.ErrInvalidLockToken) || !errors.Is(perm, agentstore.ErrLockLost) {
		t.Fatalf("invalid token does not match its sentinels")
	}
	if errors.Is(repo.ErrLockLost, duroxide.ErrInvalidLockToken) {
		t.Fatalf("ErrLockLost must not match the narrower ErrInvalidLockToken")
	}
	for _, s := range []error{agentstore.ErrInstanceRunning, agentstore.ErrSubOrchestration, agentstore.ErrOrphan, agentstore.ErrDuplicateEvent} {
		if errors.Is(s, repo.ErrRetryable) || errors.Is(s, repo.ErrLockLost) {
			t.Fatalf("%v matches an unrelated sentinel", s)
		}
	}
}

// TestProviderMemoryStore: the provider works end to end (start turn,
// worker item, admin list) on a migrated sqlite::memory: store. (The
// custom-table-prefix half of this test is the conformance test
// Errors/ProviderCustomTablePrefix.)
func TestProviderMemoryStore(t *testing.T) {
	t.Run("sqlite-memory", func(t *testing.T) {
		st, err := agentstore.Open(context.Background(), "sqlite::memory:")
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Migrate(context.Background()); err != nil {
			t.Fatal(err)
		}
		testkit.ProviderCycle(t, st.Provider(), st.ProviderAdmin())
	})
}
