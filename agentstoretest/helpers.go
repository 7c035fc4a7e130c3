package agentstoretest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// textMsg returns a user or assistant message with one text block.
func textMsg(id string, role repo.Role, text string) repo.Message {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return repo.Message{ID: id, Role: role, Content: b}
}

// newSessionsStore returns a migrated store with a test clock.
func newSessionsStore(t *testing.T, h *harness) (*agentstore.Store, *testClock) {
	t.Helper()
	clock := newTestClock()
	return h.New(t, agentstore.WithClock(clock.Now)), clock
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

// tableCounts counts the rows of every table of both domains.
func tableCounts(t *testing.T, st *agentstore.Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, b := range []string{models.TableSessions, models.TableMessages, models.TableCompacts, models.TableSummaries, models.TableQueue,
		models.TableTodos, models.TablePlans, models.TableInstances, models.TableExecutions, models.TableHistory,
		models.TableOrchestratorQueue, models.TableWorkerQueue, models.TableInstanceLocks, models.TableActivitySessions} {
		out[b] = tableCount(t, st, b, "")
	}
	return out
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// quotedTable returns the quoted, qualified name of table base of st.
func quotedTable(h *harness, st *agentstore.Store, base string) string {
	name := `"` + st.TablePrefix() + base + `"`
	if h.Schema != "" {
		return `"` + h.Schema + `".` + name
	}
	return name
}

// tableCount counts the rows of table base matching where (may be "").
func tableCount(t testing.TB, st *agentstore.Store, base, where string, args ...any) int64 {
	t.Helper()
	var n int64
	q := st.DB(context.Background()).Table(st.Table(base))
	if where != "" {
		q = q.Where(where, args...)
	}
	if err := q.Count(&n).Error; err != nil {
		t.Fatalf("count %s where %q: %v", base, where, err)
	}
	return n
}
