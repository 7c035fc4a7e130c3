package agentstore_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
)

// backends returns the sorted pids of the server connections named app.
func backends(t *testing.T, admin *sql.DB, app string) []int {
	t.Helper()
	rows, err := admin.Query("SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid", app)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitFor polls cond every 50 ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
	}
}

// TestPoolMinIdleConnsKeptOpenAndWarm: WithPool's MinIdleConns is honoured
// on PostgreSQL, counted on the server (pg_stat_activity): 5 connections
// are open within 2 s of Open, the same 5 (same backend pids) are still
// open after 2.5 idle timeouts, two killed by the server are replaced,
// a burst may use up to MaxOpenConns and never more, and Close closes them
// all. Without MinIdleConns the pool drains to nothing after the idle
// timeout.
func TestPoolMinIdleConnsKeptOpenAndWarm(t *testing.T) {
	t.Parallel()
	admin := requirePostgres(t)
	ctx := context.Background()
	const idle = 2 * time.Second
	open := func(minIdle int) (*agentstore.Store, string) {
		app := "keeper_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		st, err := agentstore.Open(ctx, postgresDSN()+"&application_name="+app,
			agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 8, MinIdleConns: minIdle, IdleTimeout: idle}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st, app
	}
	st, app := open(5)
	bare, bareApp := open(0)
	if !waitFor(2*time.Second, func() bool { return len(backends(t, admin, app)) == 5 }) {
		t.Fatalf("%d server connections 2 s after Open, want MinIdleConns 5", len(backends(t, admin, app)))
	}
	warm := backends(t, admin, app)
	time.Sleep(idle * 5 / 2)
	if got := backends(t, admin, app); !slices.Equal(got, warm) {
		t.Fatalf("after 2.5 idle timeouts the connections are %v, want the same %v (kept, not reopened)", got, warm)
	}
	// (the keeper's own ping holds its connections for a moment every
	// IdleTimeout/2: wait until it has returned them)
	if !waitFor(time.Second, func() bool { return st.SQLDB().Stats().Idle == 5 }) {
		t.Fatalf("pool stats %+v, want 5 idle", st.SQLDB().Stats())
	}
	if n := len(backends(t, admin, bareApp)); n != 0 {
		t.Fatalf("without MinIdleConns %d connections are open after 2.5 idle timeouts, want 0", n)
	}
	_ = bare
	// The server drops two: they are replaced.
	if _, err := admin.Exec("SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid", warm[:2]); err != nil {
		t.Fatal(err)
	}
	if !waitFor(3*idle, func() bool {
		got := backends(t, admin, app)
		return len(got) == 5 && !slices.Contains(got, warm[0]) && !slices.Contains(got, warm[1])
	}) {
		t.Fatalf("after two were killed: %v, want 5 without %v", backends(t, admin, app), warm[:2])
	}
	// A burst holding every connection: the keeper adds none beyond MaxOpenConns.
	var held []*sql.Conn
	for range 8 {
		c, err := st.SQLDB().Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	time.Sleep(1500 * time.Millisecond)
	if n := len(backends(t, admin, app)); n != 8 {
		t.Fatalf("%d server connections with all 8 in use, want 8 (MaxOpenConns)", n)
	}
	for _, c := range held {
		_ = c.Close()
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if !waitFor(2*time.Second, func() bool { return len(backends(t, admin, app)) == 0 }) {
		t.Fatalf("%d server connections after Close, want 0", len(backends(t, admin, app)))
	}
}

// TestPoolMinIdleConnsSQLite: on SQLite the read pool keeps MinIdleConns
// connections open, past the idle timeout.
func TestPoolMinIdleConnsSQLite(t *testing.T) {
	t.Parallel()
	st, err := agentstore.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "k.db"),
		agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 6, MinIdleConns: 3, IdleTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if !waitFor(2*time.Second, func() bool { return st.SQLDB().Stats().OpenConnections == 3 }) {
		t.Fatalf("read pool %+v 2 s after Open, want 3 open", st.SQLDB().Stats())
	}
	time.Sleep(2500 * time.Millisecond)
	if s := st.SQLDB().Stats(); s.OpenConnections != 3 || s.MaxIdleTimeClosed != 0 {
		t.Fatalf("read pool %+v after 2.5 idle timeouts, want the same 3 open, none closed for idleness", s)
	}
}

// TestPoolConfigValidation: MinIdleConns above MaxOpenConns (the default
// 10 when MaxOpenConns is 0) is ErrInvalidConfig.
func TestPoolConfigValidation(t *testing.T) {
	t.Parallel()
	for _, p := range []agentstore.PoolConfig{{MaxOpenConns: 2, MinIdleConns: 3}, {MinIdleConns: 11}, {MinIdleConns: -1}} {
		if _, err := agentstore.Open(context.Background(), "sqlite::memory:", agentstore.WithPool(p)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("WithPool(%+v) = %v, want ErrInvalidConfig", p, err)
		}
	}
}
