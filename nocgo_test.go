//go:build !cgo

package agentstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
)

// TestSQLiteUnavailableWithoutCgo: a CGO_ENABLED=0 build recognises sqlite:
// DSNs and refuses them with ErrDialectUnavailable (also ErrInvalidConfig),
// saying how to get SQLite. DDL needs no driver (it renders the embedded
// migrations), so it works for both dialects. (CI runs this with
// CGO_ENABLED=0.)
func TestSQLiteUnavailableWithoutCgo(t *testing.T) {
	_, err := agentstore.Open(context.Background(), "sqlite:"+t.TempDir()+"/x.db")
	if !errors.Is(err, agentstore.ErrDialectUnavailable) || !errors.Is(err, agentstore.ErrInvalidConfig) || !strings.Contains(err.Error(), "CGO_ENABLED=1") {
		t.Fatalf("Open(sqlite) without cgo = %v, want ErrDialectUnavailable naming CGO_ENABLED=1", err)
	}
	if ddl, err := agentstore.DDL(agentstore.SQLite); err != nil || !strings.Contains(ddl, "CREATE TABLE") {
		t.Fatalf("DDL(sqlite) without cgo: %v", err)
	}
	if ddl, err := agentstore.DDL(agentstore.Postgres); err != nil || !strings.Contains(ddl, "CREATE TABLE") {
		t.Fatalf("DDL(postgres) without cgo: %v", err)
	}
}
