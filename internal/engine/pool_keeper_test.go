package engine

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/agentstore/agentstore/internal/dialect"
)

// TestPoolKeeperNeverWaitsForAConnection: a keeper asked (by a stale
// count) for more connections than the pool can give while the
// application keeps one in use (a listener, a long transaction) takes what
// is there, pings it and returns at once; it does not hold the others
// while waiting for the busy one, so the application's next statement
// gets a connection at once. (Before, the keeper waited for its connect
// timeout holding every other connection, and so did the application.)
// PostgreSQL.
func TestPoolKeeperNeverWaitsForAConnection(t *testing.T) {
	dsn := os.Getenv("AGENTSTORE_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	ctx := context.Background()
	db, err := sql.Open("pgx", dsn) // registered by the postgres dialect (testDialects)
	if err == nil {
		err = db.PingContext(ctx)
	}
	if err != nil {
		if os.Getenv("AGENTSTORE_REQUIRE_POSTGRES") == "1" {
			t.Fatalf("PostgreSQL required: %v", err)
		}
		t.Skipf("NOTICE: PostgreSQL unreachable (%v)", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(3)
	db.SetMaxIdleConns(3)
	busy, err := db.Conn(ctx) // the application's connection that stays in use
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := &Config{Config: dialect.Config{Slog: slog.New(slog.NewTextHandler(io.Discard, nil))}}
	done := make(chan time.Duration, 1)
	go func() {
		t0 := time.Now()
		holdAndPing(ctx, db, 3, 30*time.Second, cfg) // three asked, two can be had
		done <- time.Since(t0)
	}()
	select {
	case d := <-done:
		if d > 5*time.Second {
			t.Fatalf("the keeper took %v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the keeper still waits for the connection in use after 10 s (it holds the other two meanwhile)")
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var one int
	if err := db.QueryRowContext(qctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("the application's statement after the keeper: %v", err)
	}
	if st := db.Stats(); st.OpenConnections != 3 || st.InUse != 1 {
		t.Fatalf("pool after the keeper: %d open, %d in use; want 3 open (the keeper's new one kept), 1 in use", st.OpenConnections, st.InUse)
	}
}
