package agentstore_test

import (
	"context"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
)

// pEnv is one provider under test with its injected clock (the helpers are
// testkit's, shared with the conformance suite) and the Store behind it,
// for the white-box helpers below.
type pEnv struct {
	*testkit.ProviderEnv
	h  *harness
	st *agentstore.Store
}

const testLock = testkit.TestLock

func newPEnv(t *testing.T, h *harness) *pEnv {
	t.Helper()
	clock := newTestClock()
	return newPEnvOn(h, h.New(t, agentstore.WithClock(clock.Now)), clock)
}

// newPEnvOn returns the environment of st's provider, st opened with clock.
func newPEnvOn(h *harness, st *agentstore.Store, clock *testClock) *pEnv {
	return &pEnv{ProviderEnv: &testkit.ProviderEnv{P: st.Provider(), A: st.ProviderAdmin(), Clock: clock, Ctx: context.Background()},
		h: h, st: st}
}

// count returns the number of rows of table base.
func (e *pEnv) count(t *testing.T, base string) int64 {
	t.Helper()
	var n int64
	if err := e.st.DB(e.Ctx).Table(e.st.Table(base)).Count(&n).Error; err != nil {
		t.Fatalf("count %s: %v", base, err)
	}
	return n
}

func (e *pEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if err := e.st.DB(e.Ctx).Exec(sql, args...).Error; err != nil {
		t.Fatalf("exec %q: %v", sql, err)
	}
}
