package dialect_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/internal/dialect/postgres"
	"github.com/agentstore/agentstore/internal/dialect/sqlite"
	"github.com/agentstore/agentstore/repo"
)

// TestOpenFailureTimeouts: a statement of Open ended by the Store's own
// statement or lock timeout is reported as that timeout, not as a bad
// configuration (a SQLite Store opened with a 1 ms statement timeout on a
// loaded machine was told "SQLite cannot open the file", ErrInvalidConfig).
func TestOpenFailureTimeouts(t *testing.T) {
	for _, d := range []dialect.Dialect{sqlite.New(), postgres.New()} {
		for _, kind := range []error{repo.ErrStatementTimeout, repo.ErrLockTimeout} {
			err := dialect.OpenFailure(context.Background(), d, "sqlite:/tmp/x.db", "/tmp/x.db", &dialect.Config{},
				&dialect.Fault{Kind: kind, Cause: errors.New("interrupted")})
			if !errors.Is(err, kind) || errors.Is(err, dialect.ErrInvalidConfig) {
				t.Fatalf("%s: Open failing on %v = %v, want that timeout, not ErrInvalidConfig", d.Name(), kind, err)
			}
		}
	}
}
