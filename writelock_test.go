package agentstore_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestSQLiteNewWriteLockHonoursContext: on a SQLite Store made by New
// (writes serialised by the Store's own lock, no dedicated write
// connection), a write whose context ends while a WithSessionLock function
// holds that lock returns the context's error at its deadline instead of
// waiting for the function to finish; the lock holder is unaffected.
func TestSQLiteNewWriteLockHonoursContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wl.db")
	(&harness{Dialect: agentstore.SQLite, DSN: "sqlite:" + path}).New(t) // migrate
	gdb := openGormSQLite(t, "file:"+path+"?_busy_timeout=10000&_journal_mode=WAL&_foreign_keys=on")
	st, err := agentstore.New(gdb)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	held, other := repo.NewSession(), repo.NewSession()
	for _, s := range []*repo.Session{held, other} {
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	inside, release := make(chan struct{}), make(chan struct{})
	lockDone := make(chan error, 1)
	go func() {
		lockDone <- st.Sessions().WithSessionLock(ctx, held.ID, func(ctx context.Context, tx repo.Sessions) error {
			close(inside)
			<-release
			_, err := tx.AppendMessages(ctx, held.ID, repo.Message{ID: "in-lock", Role: repo.RoleUser, Content: []byte(`"x"`)})
			return err
		})
	}()
	<-inside
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		_, err := st.Sessions().AppendMessages(short, other.ID, repo.Message{ID: "blocked", Role: repo.RoleUser, Content: []byte(`"y"`)})
		waited <- err
	}()
	select {
	case err := <-waited:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("append while the lock is held, 100 ms deadline: %v, want context.DeadlineExceeded", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an append with a 100 ms deadline still waits for the held write lock after 20 s")
	}
	close(release)
	if err := <-lockDone; err != nil {
		t.Fatalf("the lock holder failed: %v", err)
	}
	s, err := st.Sessions().Load(ctx, other.ID)
	if err != nil || len(s.Messages) != 0 {
		t.Fatalf("the timed-out append wrote: %v %v", s, err)
	}
}
