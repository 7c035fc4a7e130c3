// Command feed tails a session's change feed (Store.ChangeFeed) while
// another Store — or another process — writes to the session.
//
// By default it runs both sides against one SQLite file: a writer Store
// saves a session, appends messages, runs a queue item through its states
// and deletes the session; a second Store (its own connection pool, as a
// second process would have) watches the session's feed and prints each
// change as it commits, stopping at the session's deletion. To watch from
// another process, start a tail and then a writer on the same database:
//
//	go run ./examples/feed --dsn sqlite:/tmp/feed.db --role tail --session 0190...   # terminal 1
//	go run ./examples/feed --dsn sqlite:/tmp/feed.db --role write --session 0190...  # terminal 2
//
// A tail prints the cursor after each change: pass it as --after to resume
// there, without missing or repeating a change.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "feed:", err)
		os.Exit(1)
	}
}

// msg returns a message with one text block.
func msg(id string, role repo.Role, text string) repo.Message {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return repo.Message{ID: id, Role: role, Content: b}
}

func run() error {
	dir, err := os.MkdirTemp("", "agentstore-feed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dsn := flag.String("dsn", "sqlite:"+filepath.Join(dir, "agent.db"), "agentstore DSN (sqlite:PATH or postgres://...)")
	role := flag.String("role", "both", "both, tail (watch the session) or write (write to it)")
	sessionFlag := flag.String("session", "", "the session id (default: a new one; needed with --role tail or write)")
	after := flag.String("after", "", "tail: the cursor to resume after (default: the start of the feed)")
	timeout := flag.Duration("timeout", time.Minute, "tail: give up after this long")
	flag.Parse()

	id := uuid.New()
	if *sessionFlag != "" {
		if id, err = uuid.Parse(*sessionFlag); err != nil {
			return fmt.Errorf("--session: %w", err)
		}
	} else if *role != "both" {
		return errors.New("--role tail and --role write need --session (the same id in both processes)")
	}

	ctx := context.Background()
	open := func() (*agentstore.Store, error) {
		st, err := agentstore.Open(ctx, *dsn)
		if err != nil {
			return nil, err
		}
		if err := st.Migrate(ctx); err != nil { // V10 creates the feed
			st.Close()
			return nil, err
		}
		return st, nil
	}

	switch *role {
	case "tail":
		st, err := open()
		if err != nil {
			return err
		}
		defer st.Close()
		return tail(ctx, st, id, repo.ChangeCursor(*after), *timeout)
	case "write":
		st, err := open()
		if err != nil {
			return err
		}
		defer st.Close()
		return write(ctx, st, id)
	case "both":
	default:
		return fmt.Errorf("--role %q: want both, tail or write", *role)
	}

	writer, err := open()
	if err != nil {
		return err
	}
	defer writer.Close()
	watcher, err := open() // a second Store: what another process would have
	if err != nil {
		return err
	}
	defer watcher.Close()
	done := make(chan error, 1)
	go func() { done <- tail(ctx, watcher, id, repo.ChangeCursor(*after), *timeout) }()
	time.Sleep(100 * time.Millisecond) // let the tail start first: it catches up from its cursor anyway
	if err := write(ctx, writer, id); err != nil {
		return err
	}
	return <-done
}

// tail prints the session's changes as they commit, from after, until the
// session is deleted or timeout passes.
func tail(ctx context.Context, st *agentstore.Store, id uuid.UUID, after repo.ChangeCursor, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deleted := errors.New("session deleted")
	err := st.ChangeFeed().Watch(ctx, repo.ChangesParams{SessionID: id, After: after}, func(c repo.Change) error {
		switch c.Kind {
		case repo.ChangeQueueItem:
			fmt.Printf("%-16s queue item %s is %s\n", c.Kind, c.ItemID.String()[:8], c.State)
		case repo.ChangeSessionUpdated:
			if c.ToSeq > c.FromSeq {
				fmt.Printf("%-16s v%d: messages %d..%d appended\n", c.Kind, c.Version, c.FromSeq+1, c.ToSeq)
			} else {
				fmt.Printf("%-16s v%d, state %s\n", c.Kind, c.Version, c.State)
			}
		default:
			fmt.Printf("%-16s v%d\n", c.Kind, c.Version)
		}
		fmt.Printf("%16s resume with --after %s\n", "", c.Cursor)
		if c.Kind == repo.ChangeSessionDeleted {
			return deleted
		}
		return nil
	})
	if errors.Is(err, deleted) {
		return nil
	}
	return err
}

// write makes a few changes of every kind to the session, then deletes it.
func write(ctx context.Context, st *agentstore.Store, id uuid.UUID) error {
	r, q := st.Sessions(), st.SessionQueue()
	s := repo.NewSession()
	s.ID = id
	if err := r.Save(ctx, s); err != nil {
		return err
	}
	turns := []repo.Message{
		msg("u1", repo.RoleUser, "What changed in this session?"),
		msg("a1", repo.RoleAssistant, "Watch the feed and see."),
	}
	if _, err := r.AppendMessages(ctx, id, turns...); err != nil {
		return err
	}
	if _, err := r.SetTodos(ctx, id, []repo.TodoItem{{Content: "tail the feed", ActiveForm: "tailing the feed"}}); err != nil {
		return err
	}
	if _, err := q.Enqueue(ctx, id, "summarise", 0); err != nil {
		return err
	}
	it, err := q.Dequeue(ctx, id, repo.DequeueParams{Lease: time.Minute})
	if err != nil {
		return err
	}
	if it != nil {
		if err := q.Complete(ctx, it.Lease()); err != nil {
			return err
		}
	}
	if _, err := r.AppendMessages(ctx, id, msg("u2", repo.RoleUser, "Thanks.")); err != nil {
		return err
	}
	_, err = r.Delete(ctx, id)
	return err
}
