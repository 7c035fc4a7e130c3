package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/agentstoretest"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TestConformancePostgresTimeouts runs the whole conformance suite on
// PostgreSQL with generous statement and lock timeouts, so that every
// transaction and every single statement goes through the timeout path
// (SET LOCAL in the BEGIN message, autocommit statements in a transaction
// of their own): nothing may behave differently. The round-trip count test
// runs its calls uncounted: counting wraps its own handle with New, which
// refuses the options on PostgreSQL (and the timeouts add round trips on
// purpose).
//
// Where PgBouncer runs (AGENTSTORE_TEST_PGBOUNCER_DSN, started by
// .ci/pgbouncer.sh: CI) the suite goes through it in transaction pooling,
// with WithPgBouncer and WithDirectDSN naming the direct server
// (AGENTSTORE_TEST_POSTGRES_DSN) for LISTEN and Migrate's CONCURRENTLY
// steps, schemas created and dropped through the pooler: the timeouts
// must work there (nothing outlives a transaction). Without the variable
// it fails if AGENTSTORE_REQUIRE_PGBOUNCER=1, and otherwise runs on the
// direct server as a further suite variant (AGENTSTORE_LONG_TESTS=1).
func TestConformancePostgresTimeouts(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	if dsn := os.Getenv("AGENTSTORE_TEST_PGBOUNCER_DSN"); dsn != "" {
		agentstoretest.Run(t, agentstoretest.PostgresPgBouncer(dsn, postgresDSN(), postgresSuiteTimeouts()...))
		return
	}
	if os.Getenv("AGENTSTORE_REQUIRE_PGBOUNCER") == "1" {
		t.Fatal("PgBouncer required (AGENTSTORE_REQUIRE_PGBOUNCER=1) but AGENTSTORE_TEST_PGBOUNCER_DSN is not set: run .ci/pgbouncer.sh")
	}
	requireSuiteVariant(t)
	agentstoretest.Run(t, agentstoretest.Postgres(postgresDSN(), postgresSuiteTimeouts()...))
}

// postgresSuiteTimeouts are the generous statement and lock timeouts of a
// conformance run on PostgreSQL with timeouts on.
func postgresSuiteTimeouts() []agentstore.Option {
	return []agentstore.Option{agentstore.WithStatementTimeout(time.Minute), agentstore.WithLockTimeout(30 * time.Second)}
}

// TestConformanceSQLiteTimeouts runs the whole conformance suite on SQLite
// with generous statement and lock timeouts (every statement bounded, the
// busy timeout set by WithLockTimeout).
func TestConformanceSQLiteTimeouts(t *testing.T) {
	t.Parallel()
	requireSuiteVariant(t)
	agentstoretest.Run(t, agentstoretest.SQLite(agentstore.WithStatementTimeout(time.Minute), agentstore.WithLockTimeout(20*time.Second)))
}

// TestPostgresTimeoutsBoundEveryStatement: on PostgreSQL every kind of
// statement the Store sends is bounded by the options — snapshot reads
// (Load), single autocommit statements (List, Read, GetQueueDepths, EnqueueForOrchestrator), the
// one-statement fast paths (AppendMessages' lock-and-advance, Dequeue,
// the orchestration and worker fetches) and the general transaction paths
// (fast paths off). Each call meets a table an admin transaction holds in
// ACCESS EXCLUSIVE mode: with WithLockTimeout it fails with the retryable
// ErrLockTimeout, with WithStatementTimeout alone with ErrStatementTimeout;
// the caller's deadline (20 s) would give context.DeadlineExceeded instead.
func TestPostgresTimeoutsBoundEveryStatement(t *testing.T) {
	t.Parallel()
	admin := requirePostgres(t)
	ctx := context.Background()
	h := newHarness(t, agentstore.Postgres)
	seed := h.New(t)
	sess := &repo.Session{ID: uuid.New()}
	if err := seed.Sessions().Save(ctx, sess); err != nil {
		t.Fatal(err)
	}
	quoted := func(base string) string { return `"` + h.Schema + `"."` + seed.TablePrefix() + base + `"` }
	type call struct {
		name, table string
		row         string // the session or instance the message names ("" = none)
		run         func(ctx context.Context, st *agentstore.Store) error
	}
	calls := []call{
		{"Load", models.TableSessions, sess.ID.String(), func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.Sessions().Load(ctx, sess.ID)
			return err
		}},
		{"List", models.TableSessions, "", func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.Sessions().List(ctx, repo.ListParams{})
			return err
		}},
		{"AppendMessages", models.TableSessions, sess.ID.String(), func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.Sessions().AppendMessages(ctx, sess.ID, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`"hi"`)})
			return err
		}},
		{"Dequeue", models.TableQueue, sess.ID.String(), func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.SessionQueue().Dequeue(ctx, sess.ID, repo.DequeueParams{})
			return err
		}},
		{"FetchOrchestrationItem", models.TableOrchestratorQueue, "", func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.Provider().FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			return err
		}},
		{"FetchWorkItem", models.TableWorkerQueue, "", func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
			return err
		}},
		{"Read", models.TableHistory, "i1", func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.Provider().Read(ctx, "i1")
			return err
		}},
		{"EnqueueForOrchestrator", models.TableOrchestratorQueue, "i1", func(ctx context.Context, st *agentstore.Store) error {
			return st.Provider().EnqueueForOrchestrator(ctx, &duroxide.ExternalRaised{Instance: "i1", Name: "go", Data: "x"}, 0)
		}},
		{"GetQueueDepths", models.TableOrchestratorQueue, "", func(ctx context.Context, st *agentstore.Store) error {
			_, err := st.ProviderAdmin().GetQueueDepths(ctx)
			return err
		}},
	}
	for _, mode := range []struct {
		name string
		opts []agentstore.Option
		want error
	}{
		{"lock", []agentstore.Option{agentstore.WithLockTimeout(100 * time.Millisecond)}, agentstore.ErrLockTimeout},
		{"statement", []agentstore.Option{agentstore.WithStatementTimeout(150 * time.Millisecond)}, agentstore.ErrStatementTimeout},
		{"lock-general", []agentstore.Option{agentstore.WithLockTimeout(100 * time.Millisecond), agentstore.WithoutCapabilities(agentstore.CapFastPaths)}, agentstore.ErrLockTimeout},
		{"statement-general", []agentstore.Option{agentstore.WithStatementTimeout(150 * time.Millisecond), agentstore.WithoutCapabilities(agentstore.CapFastPaths)}, agentstore.ErrStatementTimeout},
	} {
		st := h.Open(t, mode.opts...)
		for _, c := range calls {
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				tx, err := admin.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback() }()
				if _, err := tx.ExecContext(ctx, `LOCK TABLE `+quoted(c.table)+` IN ACCESS EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
				cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
				defer cancel()
				err = c.run(cctx, st)
				var re *repo.Error
				if !errors.As(err, &re) || !errors.Is(err, mode.want) || errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("%s behind a locked %s table = %v, want a *repo.Error matching %v", c.name, c.table, err, mode.want)
				}
				if re.Retryable != errors.Is(mode.want, agentstore.ErrRetryable) || strings.Contains(re.Message, "SQLSTATE") {
					t.Fatalf("%s: Retryable = %v, message %q", c.name, re.Retryable, re.Message)
				}
				if c.row != "" && !strings.Contains(re.Message, c.row) {
					t.Fatalf("%s: message %q does not name %s", c.name, re.Message, c.row)
				}
				_ = tx.Rollback()
				// the Store works again: the call succeeds (a timeout again,
				// at most twice, is the loaded machine's: 150 ms is short
				// for a multi-statement call beside the rest of the suite)
				for attempt := 1; ; attempt++ {
					err := c.run(ctx, st)
					if err == nil || errors.Is(err, agentstore.ErrNotFound) {
						break
					}
					if attempt == 3 || !errors.Is(err, mode.want) {
						t.Fatalf("%s after the lock was released (attempt %d): %v", c.name, attempt, err)
					}
					t.Logf("%s after the lock was released, attempt %d: %v", c.name, attempt, err)
				}
			})
		}
	}
}

// TestTimeoutsNewRefused: a Store made by New does not own its connections,
// so New refuses WithStatementTimeout and WithLockTimeout on both dialects
// (ErrInvalidConfig, no SQL run) and accepts them set to 0 (off).
func TestTimeoutsNewRefused(t *testing.T) {
	lite, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: testSQLiteDriver, DSN: "file::memory:"}), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	handles := map[string]*gorm.DB{"sqlite": lite}
	if _, err := adminDB(); err == nil {
		pg, err := gorm.Open(postgres.Open(postgresDSN()), &gorm.Config{})
		if err != nil {
			t.Fatal(err)
		}
		handles["postgres"] = pg
	}
	for name, gdb := range handles {
		for _, o := range []agentstore.Option{agentstore.WithStatementTimeout(time.Second), agentstore.WithLockTimeout(time.Second)} {
			if _, err := agentstore.New(gdb, o); !errors.Is(err, agentstore.ErrInvalidConfig) {
				t.Fatalf("%s: New with a timeout = %v, want ErrInvalidConfig", name, err)
			}
		}
		st, err := agentstore.New(gdb, agentstore.WithStatementTimeout(0), agentstore.WithLockTimeout(0))
		if err != nil {
			t.Fatalf("%s: New with timeouts off: %v", name, err)
		}
		_ = st.Close()
	}
}

// TestSQLiteLockTimeoutOtherConnection: a connection outside the Store
// (another process, in effect) holding SQLite's write lock (BEGIN
// IMMEDIATE) makes a Store write wait: with WithLockTimeout the call fails
// with the retryable ErrLockTimeout naming the session; without it, a
// caller's deadline shorter than the busy timeout ends the wait with
// context.DeadlineExceeded (not the 10 s busy timeout's ErrLockTimeout).
func TestSQLiteLockTimeoutOtherConnection(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, agentstore.SQLite)
	st := h.New(t)
	sess := &repo.Session{ID: uuid.New()}
	if err := st.Sessions().Save(ctx, sess); err != nil {
		t.Fatal(err)
	}
	conn := sqliteConn(t, strings.TrimPrefix(h.DSN, "sqlite:"))
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = conn.ExecContext(ctx, "ROLLBACK") }()
	msg := repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`"hi"`)}

	ts := h.Open(t, agentstore.WithLockTimeout(100*time.Millisecond))
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err := ts.Sessions().AppendMessages(cctx, sess.ID, msg)
	var re *repo.Error
	if !errors.As(err, &re) || !errors.Is(err, agentstore.ErrLockTimeout) || !re.Retryable || !strings.Contains(re.Message, sess.ID.String()) ||
		strings.Contains(re.Message, "database is locked") {
		t.Fatalf("append while another connection holds the write lock = %v, want a retryable ErrLockTimeout naming the session", err)
	}

	dctx, dcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer dcancel()
	_, err = st.Sessions().AppendMessages(dctx, sess.ID, msg)
	if !errors.As(err, &re) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, agentstore.ErrTimeout) || re.Retryable {
		t.Fatalf("append past the caller's deadline = %v, want context.DeadlineExceeded only", err)
	}
}

// TestPostgresAdminCancelIsNotStatementTimeout: a statement cancelled by
// the server on an administrator's request (pg_cancel_backend, SQLSTATE
// 57014 like a statement timeout) is ErrRetryable, not ErrStatementTimeout.
func TestPostgresAdminCancelIsNotStatementTimeout(t *testing.T) {
	t.Parallel()
	admin := requirePostgres(t)
	ctx := context.Background()
	h := newHarness(t, agentstore.Postgres)
	st := h.New(t)
	tx, err := admin.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, `LOCK TABLE "`+h.Schema+`"."`+st.TablePrefix()+models.TableSessions+`" IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := st.Sessions().List(ctx, repo.ListParams{})
		done <- err
	}()
	for cancelled := false; !cancelled; {
		select {
		case err := <-done:
			t.Fatalf("List returned before it was cancelled: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if err := admin.QueryRowContext(ctx, `SELECT COUNT(*) > 0 FROM (SELECT pg_cancel_backend(pid) FROM pg_stat_activity
			WHERE strpos(query, $1) > 0 AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()) c`, h.Schema).Scan(&cancelled); err != nil {
			t.Fatal(err)
		}
	}
	err = <-done
	if !errors.Is(err, agentstore.ErrRetryable) || errors.Is(err, agentstore.ErrTimeout) || strings.Contains(err.Error(), "canceling") {
		t.Fatalf("List cancelled by an administrator = %v, want ErrRetryable, not ErrTimeout", err)
	}
}

// BenchmarkTimeouts measures what the timeout options cost on the hot
// paths, off and on side by side, on both dialects: one worker-queue cycle
// (EnqueueForWorker, FetchWorkItem, AckWorkItem) and one AppendMessages.
//
//	go test -run '^$' -bench 'BenchmarkTimeouts' -benchtime 500x -count 3 .
func BenchmarkTimeouts(b *testing.B) {
	for _, d := range dialects {
		for _, mode := range []struct {
			name string
			opts []agentstore.Option
		}{
			{"off", nil},
			{"on", []agentstore.Option{agentstore.WithStatementTimeout(30 * time.Second), agentstore.WithLockTimeout(10 * time.Second)}},
		} {
			b.Run(string(d)+"/"+mode.name, func(b *testing.B) {
				h := newHarness(b, d)
				st := h.New(b, mode.opts...)
				p := st.Provider()
				ctx := context.Background()
				s := repo.NewSession()
				if err := st.Sessions().Save(ctx, s); err != nil {
					b.Fatal(err)
				}
				i := uint64(0)
				for b.Loop() {
					i++
					if err := p.EnqueueForWorker(ctx, testkit.Activity("bench", 1, i)); err != nil {
						b.Fatal(err)
					}
					l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
					if err != nil || l == nil {
						b.Fatalf("fetch: %v %v", l, err)
					}
					if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
						b.Fatal(err)
					}
					if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`"hi"`)}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
