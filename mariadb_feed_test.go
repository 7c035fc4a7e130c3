package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// cursorID is the change id of a cursor ("c1.<ord>.<id>").
func cursorID(t testing.TB, c repo.ChangeCursor) int64 {
	t.Helper()
	i := strings.LastIndexByte(string(c), '.')
	id, err := strconv.ParseInt(string(c)[i+1:], 10, 64)
	if err != nil {
		t.Fatalf("cursor %q: %v", c, err)
	}
	return id
}

// TestMariaDBChangeFeedOutOfOrderCommits: on MariaDB a change's
// AUTO_INCREMENT id is taken when its row is written, long before a
// transaction held open commits it, while writers with larger ids commit
// and are read. Two Stores write (16 appenders, 6 holders that append,
// keep their transaction open 30-200 ms, append to a second session and
// commit) while two consumers, one on each Store, page the feed
// concurrently from their cursors (each read runs the sequencer, so two
// sequencers contend). Each consumer must see every committed append
// exactly once, each session's appends contiguous and in order, both the
// same sequence as a fresh walk; and the run must have delivered a change
// whose id is below one delivered before it (the out-of-order commit this
// test is about happened).
func TestMariaDBChangeFeedOutOfOrderCommits(t *testing.T) {
	mariadbOnlyLongTest(t)
	t.Parallel()
	h := newHarness(t, agentstore.MariaDB)
	ctx := context.Background()
	stores := []*agentstore.Store{h.New(t), h.Open(t)}
	const (
		nSessions = 6
		nWriters  = 16
		perWriter = 15
		nHolders  = 6
		perHolder = 3
	)
	sess := make([]*repo.Session, nSessions)
	for i := range sess {
		sess[i] = repo.NewSession()
		if err := stores[0].Sessions().Save(ctx, sess[i]); err != nil {
			t.Fatal(err)
		}
	}
	_, start := readFeedAll(t, stores[0].ChangeFeed(), "")

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		committed = map[uuid.UUID]int{}
		errs      []error
		held      atomic.Int64
	)
	note := func(id uuid.UUID, err error) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			committed[id]++
		case !errors.Is(err, agentstore.ErrRetryable):
			errs = append(errs, err)
		}
	}
	msg := func(tag string) repo.Message {
		return repo.Message{ID: uuid.NewString(), Role: repo.RoleUser, Content: text(tag)}
	}
	for w := 0; w < nWriters; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := stores[w%2].Sessions()
			for i := 0; i < perWriter; i++ {
				s := sess[(w+i)%nSessions]
				_, err := r.AppendMessages(ctx, s.ID, msg(fmt.Sprintf("w%d-%d", w, i)))
				note(s.ID, err)
			}
		}(w)
	}
	for k := 0; k < nHolders; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			r := stores[k%2].Sessions()
			for i := 0; i < perHolder; i++ {
				first, second := sess[(k+i)%nSessions], sess[(k+i+1)%nSessions]
				hold := time.Duration(30+rand.IntN(170)) * time.Millisecond
				err := r.WithSessionLock(ctx, first.ID, func(ctx context.Context, tx repo.Sessions) error {
					if _, err := tx.AppendMessages(ctx, first.ID, msg(fmt.Sprintf("h%d-%d-a", k, i))); err != nil {
						return err
					}
					time.Sleep(hold) // the change row (and its id) exists, uncommitted
					if _, err := tx.AppendMessages(ctx, second.ID, msg(fmt.Sprintf("h%d-%d-b", k, i))); err != nil {
						return err
					}
					time.Sleep(hold / 4)
					return nil
				})
				note(first.ID, err)
				note(second.ID, err)
				if err == nil {
					held.Add(1)
				}
			}
		}(k)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	type consumer struct {
		f      repo.ChangeFeed
		cursor repo.ChangeCursor
		seen   []repo.Change
		err    error
	}
	cons := []*consumer{{f: stores[0].ChangeFeed(), cursor: start}, {f: stores[1].ChangeFeed(), cursor: start}}
	poll := func(c *consumer) {
		for c.err == nil {
			page, err := c.f.Changes(ctx, repo.ChangesParams{After: c.cursor, Limit: 5})
			if err != nil {
				c.err = err
				return
			}
			c.seen = append(c.seen, page.Changes...)
			c.cursor = page.Next
			if len(page.Changes) < 5 {
				return
			}
		}
	}
	var cwg sync.WaitGroup
	for _, c := range cons {
		cwg.Add(1)
		go func(c *consumer) {
			defer cwg.Done()
			for {
				select {
				case <-done:
					poll(c) // everything has committed: one last walk
					return
				case <-time.After(time.Duration(1+rand.IntN(5)) * time.Millisecond):
					poll(c)
				}
			}
		}(c)
	}
	cwg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if held.Load() == 0 {
		t.Fatal("no holder committed")
	}
	fresh, _ := readFeedAll(t, stores[1].ChangeFeed(), start)
	for i, c := range cons {
		if c.err != nil {
			t.Fatalf("consumer %d: %v", i, c.err)
		}
		cursors := map[repo.ChangeCursor]bool{}
		lastTo := map[uuid.UUID]int64{}
		got := map[uuid.UUID]int{}
		var maxID int64
		behind := 0
		for _, ch := range c.seen {
			if cursors[ch.Cursor] {
				t.Fatalf("consumer %d: change %s seen twice", i, ch.Cursor)
			}
			cursors[ch.Cursor] = true
			if id := cursorID(t, ch.Cursor); id < maxID {
				behind++
			} else {
				maxID = id
			}
			if ch.Kind != repo.ChangeSessionUpdated {
				continue
			}
			if ch.FromSeq != lastTo[ch.SessionID] {
				t.Fatalf("consumer %d: session %s: change %s appends (%d, %d] after (.., %d]: out of commit order or a change missed",
					i, ch.SessionID, ch.Cursor, ch.FromSeq, ch.ToSeq, lastTo[ch.SessionID])
			}
			lastTo[ch.SessionID] = ch.ToSeq
			got[ch.SessionID] += int(ch.ToSeq - ch.FromSeq)
		}
		for _, s := range sess {
			if got[s.ID] != committed[s.ID] {
				t.Errorf("consumer %d: session %s: the feed reports %d appended messages, %d were committed", i, s.ID, got[s.ID], committed[s.ID])
			}
		}
		if fmtFeed(c.seen) != fmtFeed(fresh) {
			t.Fatalf("consumer %d: its concurrent walk differs from a fresh walk (%d vs %d changes)", i, len(c.seen), len(fresh))
		}
		if behind == 0 {
			t.Errorf("consumer %d: no change was delivered after one with a larger id: the out-of-order commit did not happen", i)
		}
		t.Logf("consumer %d: %d changes, %d delivered after a larger id", i, len(c.seen), behind)
	}
}

// readFeedAll pages f from after to its end.
func readFeedAll(t testing.TB, f repo.ChangeFeed, after repo.ChangeCursor) ([]repo.Change, repo.ChangeCursor) {
	t.Helper()
	var out []repo.Change
	for {
		page, err := f.Changes(context.Background(), repo.ChangesParams{After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Changes) == 0 {
			return out, after
		}
		out = append(out, page.Changes...)
		after = page.Next
	}
}

// fmtFeed formats changes for comparison.
func fmtFeed(cs []repo.Change) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "[%s %s %s v%d (%d,%d] %s]", c.Cursor, c.Kind, c.SessionID, c.Version, c.FromSeq, c.ToSeq, c.State)
	}
	return b.String()
}

// BenchmarkMariaDBChangeFeedRead: what a feed read costs on MariaDB, where
// readers place the changes (docs/changes.md). idle: a read at the end of
// the feed, nothing new (the probe, the page, the horizon). placed: a read
// after one append by another Store (the append is outside the timing; the
// read places its change). The ns/op of each is one read.
func BenchmarkMariaDBChangeFeedRead(b *testing.B) {
	h := newHarness(b, agentstore.MariaDB)
	ctx := context.Background()
	w, r := h.New(b), h.Open(b)
	s := repo.NewSession()
	if err := w.Sessions().Save(ctx, s); err != nil {
		b.Fatal(err)
	}
	f := r.ChangeFeed()
	_, cur := readFeedAll(b, f, "")
	b.Run("idle", func(b *testing.B) {
		for b.Loop() {
			page, err := f.Changes(ctx, repo.ChangesParams{After: cur})
			if err != nil || len(page.Changes) != 0 {
				b.Fatal(err, len(page.Changes))
			}
		}
	})
	b.Run("placed", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			if _, err := w.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: uuid.NewString(), Role: repo.RoleUser, Content: text("x")}); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			page, err := f.Changes(ctx, repo.ChangesParams{After: cur})
			if err != nil || len(page.Changes) != 1 {
				b.Fatal(err, len(page.Changes))
			}
			cur = page.Next
		}
	})
}
