package agentstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
)

// hostileValue is one hostile string with a short name for messages.
type hostileValue struct {
	name string
	v    string
}

// hostileValues are tried everywhere an id, tenant, key or name is accepted.
func hostileValues() []hostileValue {
	return []hostileValue{
		{"single quote", "it's"},
		{"double quote", `say "hi"`},
		{"drop table", `x'; DROP TABLE agentstore_sessions; --`},
		{"drop table dq", `x"; DROP TABLE "agentstore_history"; --`},
		{"backslashes", `C:\path\n\u0000\x00`},
		{"like wildcards", `100%_done*`},
		{"unicode", "Grüße 🙂 中文 \u202e"},
		{"10 KB", strings.Repeat("0123456789", 1024)},
		{"invalid UTF-8", "bad\xff\xfe\xc3\x28"},
		{"NUL byte", "nul\x00byte"},
		{"only NUL", "\x00"},
		{"newlines", "a\r\nb\tc"},
	}
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

// TestHostileConfigNames: hostile table prefixes and schema names are
// refused by the options with ErrInvalidConfig before anything touches the
// database (they end up in DDL, so they must be plain identifiers).
func TestHostileConfigNames(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + t.TempDir() + "/cfg.db"
	rejected := 0
	for _, hv := range hostileValues() {
		if _, err := agentstore.Open(ctx, dsn, agentstore.WithTablePrefix(hv.v)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("table prefix %s: %v, want ErrInvalidConfig", hv.name, err)
		} else {
			rejected++
		}
		if _, err := agentstore.Open(ctx, postgresDSN(), agentstore.WithSchema(hv.v)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("schema %s: %v, want ErrInvalidConfig", hv.name, err)
		} else {
			rejected++
		}
	}
	relLogf(t, "hostile config names: %d table prefixes and schema names tried, %d rejected with ErrInvalidConfig", 2*len(hostileValues()), rejected)
}
