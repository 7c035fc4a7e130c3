package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// slogRecorder is a slog.Handler that keeps the "event" attribute of every
// record with its level.
type slogRecorder struct {
	mu     sync.Mutex
	events []string // "LEVEL event"
}

func (r *slogRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *slogRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *slogRecorder) WithGroup(string) slog.Handler            { return r }
func (r *slogRecorder) Handle(_ context.Context, rec slog.Record) error {
	ev := ""
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "event" {
			ev = a.Value.String()
		}
		return true
	})
	r.mu.Lock()
	r.events = append(r.events, rec.Level.String()+" "+ev)
	r.mu.Unlock()
	return nil
}

func (r *slogRecorder) has(e string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.events, e)
}

func (r *slogRecorder) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return fmt.Sprint(r.events)
}

// TestPgBouncerOptions: WithDirectDSN refuses an empty or non-PostgreSQL
// DSN, and WithPgBouncer refuses WithReadOnly (a startup parameter
// PgBouncer rejects), each with ErrInvalidConfig and no password in the
// message.
func TestPgBouncerOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := postgresDSN()
	cases := map[string][]agentstore.Option{
		"empty direct DSN":         {agentstore.WithDirectDSN("")},
		"sqlite direct DSN":        {agentstore.WithDirectDSN("sqlite:x.db")},
		"unparsable direct":        {agentstore.WithDirectDSN("postgres://u:s3cr3t@h:notaport/db")},
		"read-only behind bouncer": {agentstore.WithPgBouncer(), agentstore.WithReadOnly()},
	}
	for name, opts := range cases {
		st, err := agentstore.Open(ctx, dsn, opts...)
		if err == nil {
			_ = st.Close()
			t.Errorf("%s: Open succeeded", name)
			continue
		}
		if !errors.Is(err, agentstore.ErrInvalidConfig) || strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: Open = %v, want ErrInvalidConfig without the password", name, err)
		}
	}
}

// TestListenerLostAndReconnectLogged: the LISTEN connection of a Store
// with WithDirectDSN (its own connection, outside the pool) is killed on
// the server; the Store logs listener_lost (Warn) and, once it listens
// again, listener_reconnected (Info), and a cross-Store enqueue wakes its
// waiting fetch again well before the fallback re-check.
func TestListenerLostAndReconnectLogged(t *testing.T) {
	t.Parallel()
	admin := requirePostgres(t)
	h := newHarness(t, agentstore.Postgres)
	rec := &slogRecorder{}
	ctx := context.Background()
	st := h.New(t, agentstore.WithDirectDSN(postgresDSN()), agentstore.WithSlog(slog.New(rec)),
		agentstore.WithPollInterval(3*time.Second), agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 2}))
	other := h.Open(t)
	// A pool of 2 would get no listener without WithDirectDSN: it is not pooled.
	if _, err := st.Provider().FetchWorkItem(ctx, time.Minute, 300*time.Millisecond, nil, duroxide.TagFilter{}); err != nil {
		t.Fatal(err)
	}
	hs := fnv.New64a()
	_, _ = hs.Write([]byte(h.Schema + "." + agentstore.DefaultTablePrefix))
	listen := fmt.Sprintf(`LISTEN "agentstore_wake_%016x"`, hs.Sum64())
	var killed int
	if err := admin.QueryRowContext(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE query = $1`, listen).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	if killed != 1 {
		t.Fatalf("%d LISTEN connections for %s, want 1", killed, listen)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !(rec.has("WARN listener_lost") && rec.has("INFO listener_reconnected")) {
		if time.Now().After(deadline) {
			t.Fatalf("no listener_lost + listener_reconnected events after killing the listener: %s", rec)
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 10*time.Second, nil, duroxide.TagFilter{})
		if err == nil && l == nil {
			err = errors.New("no item")
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := other.Provider().EnqueueForWorker(ctx, testkit.Activity("relisten", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 1500*time.Millisecond {
		t.Fatalf("fetch woken after %v (fallback 3 s): the listener did not come back", el)
	}
}

// TestPgBouncerWithoutDirectDSN: through PgBouncer in transaction pooling
// without WithDirectDSN, a Store logs the wake-up fallback (Warn
// wakeup_fallback) when its first fetch waits, still works (an enqueue by
// another Store is found by the fallback re-check), and Migrate refuses
// the CONCURRENTLY step of a database at V1 with ErrInvalidConfig (an
// empty database is migrated in one transaction, which a transaction
// pooler carries: that works).
func TestPgBouncerWithoutDirectDSN(t *testing.T) {
	dsn := os.Getenv("AGENTSTORE_TEST_PGBOUNCER_DSN")
	if dsn == "" {
		if os.Getenv("AGENTSTORE_REQUIRE_PGBOUNCER") == "1" {
			t.Fatal("PgBouncer required (AGENTSTORE_REQUIRE_PGBOUNCER=1) but AGENTSTORE_TEST_PGBOUNCER_DSN is not set")
		}
		t.Skip("AGENTSTORE_TEST_PGBOUNCER_DSN not set")
	}
	t.Parallel()
	ctx := context.Background()
	h := newHarness(t, agentstore.Postgres)
	fresh := newHarness(t, agentstore.Postgres)
	pooledFresh, err := agentstore.Open(ctx, dsn, agentstore.WithSchema(fresh.Schema), agentstore.WithPgBouncer())
	if err != nil {
		t.Fatal(err)
	}
	defer pooledFresh.Close()
	if err := pooledFresh.Migrate(ctx); err != nil {
		t.Fatalf("Migrate of an empty database through PgBouncer without WithDirectDSN: %v", err)
	}
	testkit.VerifyClean(t, pooledFresh)
	if err := h.Open(t).MigrateTo(ctx, 1); err != nil {
		t.Fatal(err)
	}
	pooled, err := agentstore.Open(ctx, dsn, agentstore.WithSchema(h.Schema), agentstore.WithPgBouncer())
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Close()
	if err := pooled.Migrate(ctx); !errors.Is(err, agentstore.ErrInvalidConfig) || !strings.Contains(err.Error(), "WithDirectDSN") {
		t.Fatalf("Migrate of a V1 database through PgBouncer without WithDirectDSN = %v, want ErrInvalidConfig naming WithDirectDSN", err)
	}
	h.New(t) // migrate directly
	rec := &slogRecorder{}
	st, err := agentstore.Open(ctx, dsn, agentstore.WithSchema(h.Schema), agentstore.WithPgBouncer(),
		agentstore.WithSlog(slog.New(rec)), agentstore.WithPollInterval(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	other := h.Open(t)
	done := make(chan error, 1)
	go func() {
		l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 5*time.Second, nil, duroxide.TagFilter{})
		if err == nil && l == nil {
			err = errors.New("no item")
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	if err := other.Provider().EnqueueForWorker(ctx, testkit.Activity("fallback", 1, 1)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("fetch through PgBouncer: %v", err)
	}
	if !rec.has("WARN wakeup_fallback") {
		t.Fatalf("no wakeup_fallback warning: %s", rec)
	}
}

// preparedNames returns the names of the statements pgx prepared on st's
// (single) connection.
func preparedNames(t *testing.T, st *agentstore.Store) []string {
	t.Helper()
	var names []string
	if err := st.DB(context.Background()).Raw("SELECT name FROM pg_prepared_statements WHERE name LIKE 'stmtcache_%'").Scan(&names).Error; err != nil {
		t.Fatal(err)
	}
	return names
}

// TestPgBouncerWithoutOptionIsNamed: the two failures a transaction pooler
// causes when the Store keeps named prepared statements (no
// WithPgBouncer) — "prepared statement already exists" (42P05: another
// client prepared it on the server connection this client got) and
// "prepared statement does not exist" (26000: this client's statement
// stayed on another server connection) — are reproduced on one direct
// connection and reach the caller as ErrInvalidConfig, not retryable,
// with a message that names WithPgBouncer and no driver text, through the
// session API and the provider alike.
func TestPgBouncerWithoutOptionIsNamed(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	ctx := context.Background()
	one := agentstore.WithPool(agentstore.PoolConfig{MaxOpenConns: 1, MinIdleConns: 1})
	h := newHarness(t, agentstore.Postgres)
	a := h.New(t, one)
	s := repo.NewSession()
	if err := a.Sessions().Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, agentstore.ErrInvalidConfig) || agentstore.IsRetryable(err) || !strings.Contains(err.Error(), "WithPgBouncer") {
			t.Fatalf("%s = %v, want ErrInvalidConfig naming WithPgBouncer", what, err)
		}
		for _, raw := range []string{"SQLSTATE", "stmtcache_", "prepared statement \""} {
			if strings.Contains(err.Error(), raw) {
				t.Fatalf("%s: driver text %q in %q", what, raw, err.Error())
			}
		}
	}
	// 42P05: the statements a's Load and ListInstances prepared, prepared
	// beforehand under the same names on b's connection.
	if _, err := a.Sessions().Load(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.ProviderAdmin().ListInstances(ctx); err != nil {
		t.Fatal(err)
	}
	names := preparedNames(t, a)
	if len(names) == 0 {
		t.Fatal("no prepared statements on the connection: the check would be vacuous")
	}
	b := h.Open(t, one)
	for _, n := range names {
		if err := b.DB(ctx).Exec(`PREPARE "` + n + `" AS SELECT 1`).Error; err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.Sessions().Load(ctx, s.ID)
	check("Load over a statement another client prepared", err)
	_, err = b.ProviderAdmin().ListInstances(ctx)
	check("ListInstances over a statement another client prepared", err)
	// 26000: a's statements deallocated behind its back.
	if err := a.DB(ctx).Exec("DEALLOCATE ALL").Error; err != nil {
		t.Fatal(err)
	}
	_, err = a.Sessions().Load(ctx, s.ID)
	check("Load of a statement the server no longer has", err)
}
