package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/agentstore/agentstore/internal/dialect"
)

// notifierForTest returns a notifier of a channel no other test uses, on a
// pool of the test server (AGENTSTORE_TEST_POSTGRES_DSN), with its
// listener up.
func notifierForTest(t *testing.T) (*pgNotifier, string) {
	t.Helper()
	// The README's default server unless AGENTSTORE_TEST_POSTGRES_DSN names
	// another; unreachable, the test skips, or fails under
	// AGENTSTORE_REQUIRE_POSTGRES=1 (CI).
	dsn := os.Getenv("AGENTSTORE_TEST_POSTGRES_DSN")
	if dsn == "" {
		dsn = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	pc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal("AGENTSTORE_TEST_POSTGRES_DSN does not parse")
	}
	db := stdlib.OpenDB(*pc)
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	perr := db.PingContext(pctx)
	pcancel()
	if perr != nil {
		_ = db.Close()
		if os.Getenv("AGENTSTORE_REQUIRE_POSTGRES") == "1" {
			t.Fatal("PostgreSQL required (AGENTSTORE_REQUIRE_POSTGRES=1) but not reachable")
		}
		t.Skip("PostgreSQL not reachable")
	}
	bg, cancel := context.WithCancel(context.Background())
	schema := fmt.Sprintf("notify_test_%d", time.Now().UnixNano())
	env := &dialect.Env{Config: &dialect.Config{Schema: schema, Prefix: "agentstore_", Slog: slog.New(slog.DiscardHandler)}, SQLDB: db, BG: bg}
	n := newPGNotifier(env, func(string) {})
	t.Cleanup(func() {
		cancel()
		n.Wait()
		_ = db.Close()
	})
	n.Start()
	deadline := time.Now().Add(10 * time.Second)
	for !n.Healthy() || n.listenerPID.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the listener did not come up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return n, dsn
}

// rawListener LISTENs on channel on a connection of its own, as a Store of
// any version (or any other program) would.
func rawListener(t *testing.T, dsn, channel string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	if _, err := c.Exec(context.Background(), `LISTEN "`+channel+`"`); err != nil {
		t.Fatal(err)
	}
	return c
}

// awaitKind waits up to within for a notification of kind on c.
func awaitKind(t *testing.T, c *pgx.Conn, kind string, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		note, err := c.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("no notification %q within %v: %v", kind, within, err)
		}
		if k, _, _ := strings.Cut(note.Payload, ":"); k == kind {
			return time.Since(start)
		}
	}
}

// TestNotifySkippedWithoutOtherListener: a Store whose channel no other
// session listens on sends no NOTIFY for its enqueues (it asks the
// activity view instead, at most once per presenceTTL).
func TestNotifySkippedWithoutOtherListener(t *testing.T) {
	t.Parallel()
	n, _ := notifierForTest(t)
	for range 20 {
		n.Publish(dialect.NotifyWork)
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(3 * presenceTTL)
	if s := n.sent.Load(); s != 0 {
		t.Fatalf("%d NOTIFYs sent with no other listener, want 0", s)
	}
}

// TestNotifyReachesOtherListener: a session LISTENing on the channel (a
// Store of an older version, another process, any program) gets every
// kind published, whether it listened before the publisher's first
// presence check or started listening right after one (then at most
// about presenceTTL late).
func TestNotifyReachesOtherListener(t *testing.T) {
	t.Parallel()
	t.Run("listening before", func(t *testing.T) {
		t.Parallel()
		n, dsn := notifierForTest(t)
		c := rawListener(t, dsn, n.channel)
		for _, kind := range []string{dialect.NotifyOrch, dialect.NotifyWork} {
			n.Publish(kind)
			if d := awaitKind(t, c, kind, 2*time.Second); d > time.Second {
				t.Fatalf("kind %q after %v", kind, d)
			}
		}
	})
	t.Run("listening after an alone answer", func(t *testing.T) {
		t.Parallel()
		n, dsn := notifierForTest(t)
		// an answer "alone", fresh for presenceTTL
		n.Publish(dialect.NotifyFeed)
		deadline := time.Now().Add(5 * time.Second)
		for {
			n.Publish(dialect.NotifyFeed)
			time.Sleep(time.Millisecond)
			n.mu.Lock()
			flushed := len(n.pending) == 0
			n.mu.Unlock()
			if flushed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the publisher did not take the pending kinds")
			}
		}
		c := rawListener(t, dsn, n.channel)
		n.Publish(dialect.NotifyWork) // within presenceTTL of the answer: skipped, then sent at the re-check
		if d := awaitKind(t, c, dialect.NotifyWork, 2*time.Second); d > 500*time.Millisecond {
			t.Fatalf("a listener that appeared after the presence check was woken after %v", d)
		}
	})
}

// TestPresenceSQLSeesListeners: the presence query counts a LISTEN
// session of the channel, and not the notifier's own listener.
func TestPresenceSQLSeesListeners(t *testing.T) {
	t.Parallel()
	n, dsn := notifierForTest(t)
	if !n.alone() {
		t.Fatal("alone() = false with only the notifier's own listener")
	}
	c := rawListener(t, dsn, n.channel)
	if n.alone() {
		t.Fatal("alone() = true with another session listening")
	}
	_ = c.Close(context.Background())
	deadline := time.Now().Add(5 * time.Second)
	for !n.alone() {
		if time.Now().After(deadline) {
			t.Fatal("alone() stays false after the other listener closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
