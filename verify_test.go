package agentstore_test

import (
	"context"
	"testing"

	"github.com/agentstore/agentstore"
)

// verifyClean fails t unless Verify reports zero issues on st.
func verifyClean(t *testing.T, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	rep, err := st.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if !rep.OK() {
		t.Fatalf("Verify found %d issues on a %s schema that should be clean:\n%s", len(rep.Issues), st.Dialect(), rep)
	}
	return rep
}

func TestVerify_FreshlyMigratedIsClean(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		rep := verifyClean(t, h.New(t))
		if rep.Tables != 15 || rep.DatabaseVersion != agentstore.SchemaVersion {
			t.Fatalf("report = %+v", rep)
		}
	})
}
