package agentstoretest

import (
	"context"
	"strconv"
	"testing"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
)

// testClock is a settable clock for Config.Clock.
type testClock = testkit.Clock

func newTestClock() *testClock { return testkit.NewClock() }

// textMsg returns a user or assistant message with one text block.
func textMsg(id string, role repo.Role, text string) repo.Message {
	return testkit.TextMsg(id, role, text)
}

// newSessionsStore returns a handle with a test clock.
func newSessionsStore(t *testing.T, h *harness) (Store, *testClock) {
	t.Helper()
	clock := newTestClock()
	return h.New(t, withClock(clock.Now)), clock
}

func mustSave(t *testing.T, r repo.Sessions, s *repo.Session) {
	t.Helper()
	if err := r.Save(context.Background(), s); err != nil {
		t.Fatalf("save: %v", err)
	}
}

func mustLoad(t *testing.T, r repo.Sessions, id uuid.UUID, opts ...repo.LoadOptions) *repo.Session {
	t.Helper()
	s, err := r.Load(context.Background(), id, opts...)
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	return s
}

func msgIDs(ms []repo.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func msgSeqs(ms []repo.Message) []int64 {
	out := make([]int64, len(ms))
	for i, m := range ms {
		out[i] = m.Seq
	}
	return out
}

// mustInt parses a stored integer (DatabaseOps.Values returns text).
func mustInt(t testing.TB, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("stored value %q is not an integer: %v", s, err)
	}
	return n
}
