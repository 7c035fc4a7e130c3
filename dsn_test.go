package agentstore_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestOpen_KeyValueDSN: a libpq key=value DSN (GORM's form) opens
// PostgreSQL, and ParseDSN names the dialect.
func TestOpen_KeyValueDSN(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	u, err := url.Parse(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	kv := "host=" + u.Hostname() + " port=" + u.Port() + " user=" + u.User.Username() + " dbname=" + strings.TrimPrefix(u.Path, "/") + " sslmode=disable"
	if d, _, err := agentstore.ParseDSN(kv); err != nil || d != agentstore.Postgres {
		t.Fatalf("ParseDSN(%q) = %v, %v", kv, d, err)
	}
	st, err := agentstore.Open(context.Background(), kv)
	if err != nil {
		t.Fatalf("Open(%q): %v", kv, err)
	}
	defer st.Close()
	if err := st.SQLDB().PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOpen_ErrorNamesDSNOnce: a connection failure names the redacted
// target once, never the password, and is retryable (the server's
// failure); a call ended by the caller's own deadline is not.
func TestOpen_ErrorNamesDSNOnce(t *testing.T) {
	t.Parallel()
	const pw = "Sup3r-s3cret-pw"
	dsn := "postgres://agent:" + pw + "@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	_, err := agentstore.Open(context.Background(), dsn)
	if err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
	if strings.Contains(err.Error(), pw) || strings.Count(err.Error(), "127.0.0.1:1/none") != 1 {
		t.Fatalf("error must name the redacted DSN once: %v", err)
	}
	if !agentstore.IsRetryable(err) {
		t.Fatalf("a refused connection is not retryable: %v", err)
	}
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
		defer cancel()
		<-ctx.Done()
		_, err := st.Sessions().List(ctx, repoListAll())
		if err == nil || agentstore.IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call past the caller's deadline = %v, want context.DeadlineExceeded, not retryable", err)
		}
	})
}

func repoListAll() repo.ListParams { return repo.ListParams{} }
