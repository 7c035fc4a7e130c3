package agentstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
)

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

// TestHostileConfigNames: hostile table prefixes and schema names are
// refused by the options with ErrInvalidConfig before anything touches the
// database (they end up in DDL, so they must be plain identifiers).
func TestHostileConfigNames(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + t.TempDir() + "/cfg.db"
	rejected := 0
	for _, hv := range testkit.HostileValues() {
		if _, err := agentstore.Open(ctx, dsn, agentstore.WithTablePrefix(hv.V)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("table prefix %s: %v, want ErrInvalidConfig", hv.Name, err)
		} else {
			rejected++
		}
		if _, err := agentstore.Open(ctx, postgresDSN(), agentstore.WithSchema(hv.V)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("schema %s: %v, want ErrInvalidConfig", hv.Name, err)
		} else {
			rejected++
		}
	}
	relLogf(t, "hostile config names: %d table prefixes and schema names tried, %d rejected with ErrInvalidConfig", 2*len(testkit.HostileValues()), rejected)
}
