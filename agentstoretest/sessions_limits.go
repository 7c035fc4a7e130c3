package agentstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// sessionsLimitsTests are the Sessions area's tests of this file.
func sessionsLimitsTests() []test {
	return tests(
		test{"SessionsStaleVersionMessageIsTrue", testSessionsStaleVersionMessageIsTrue},
		test{"SessionsContentSizeLimit", testSessionsContentSizeLimit},
		test{"SessionsMessageContentShape", testSessionsMessageContentShape},
	)
}

// stmtCounter counts the statements a handle sends (Config.OnStatement).
type stmtCounter struct{ n atomic.Int64 }

// withStatementCount counts the handle's statements in c.
func withStatementCount(c *stmtCounter) option {
	return func(cfg *Config) { cfg.OnStatement = func(Statement) { c.n.Add(1) } }
}

// testSessionsStaleVersionMessageIsTrue: the *StaleVersionError message
// lists the writes that add 1 to a session's version and says Fork does
// not; each listed write does add exactly 1 (and makes an older copy
// stale), and Fork leaves its origin's version as it was (a copy loaded
// before the fork still saves).
func testSessionsStaleVersionMessageIsTrue(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	s.AddMessage(textMsg("m1", repo.RoleUser, "hello"))
	mustSave(t, r, s)
	version := func() int64 { return mustLoad(t, r, s.ID).Version }
	var msg string
	bumps := map[string]func() error{
		"Save": func() error { c := mustLoad(t, r, s.ID); c.Summary = ptr("x"); return r.Save(ctx, c) },
		"AppendMessages": func() error {
			_, err := r.AppendMessages(ctx, s.ID, textMsg("", repo.RoleUser, "a"))
			return err
		},
		"AppendMessagesWith": func() error {
			_, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: version()}, textMsg("", repo.RoleUser, "b"))
			return err
		},
		"SetTodos": func() error {
			_, err := r.SetTodos(ctx, s.ID, []repo.TodoItem{{Content: "t", ActiveForm: "t-ing"}})
			return err
		},
		"AddSummary": func() error {
			_, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: "sum"})
			return err
		},
	}
	for name, write := range bumps {
		stale := mustLoad(t, r, s.ID)
		before := stale.Version
		if err := write(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if after := version(); after != before+1 {
			t.Fatalf("%s moved the version %d -> %d, want +1", name, before, after)
		}
		stale.Summary = ptr("stale")
		err := r.Save(ctx, stale)
		var sv *agentstore.StaleVersionError
		if !errors.As(err, &sv) || sv.Expected != before || sv.Stored != before+1 {
			t.Fatalf("Save of a copy older than %s = %v, want a StaleVersionError %d/%d", name, err, before, before+1)
		}
		msg = sv.Error()
		if !strings.Contains(msg, name+",") && !strings.Contains(msg, name+" ") {
			t.Fatalf("the stale-version message does not list %s: %s", name, msg)
		}
	}
	if !strings.Contains(msg, "Fork leaves its origin's version unchanged") || strings.Contains(msg, "and Fork bump") {
		t.Fatalf("the stale-version message misstates Fork: %s", msg)
	}
	loaded := mustLoad(t, r, s.ID)
	if _, err := r.Fork(ctx, s.ID, "m1"); err != nil {
		t.Fatal(err)
	}
	if v := version(); v != loaded.Version {
		t.Fatalf("Fork moved its origin's version %d -> %d", loaded.Version, v)
	}
	loaded.Summary = ptr("after fork")
	if err := r.Save(ctx, loaded); err != nil {
		t.Fatalf("Save of a copy loaded before a Fork = %v, want nil (Fork does not bump)", err)
	}
}

func ptr[T any](v T) *T { return &v }

// testSessionsContentSizeLimit: with WithMaxContentBytes(n), message
// content (AppendMessages, AppendMessagesWith, Save) and queue-item
// content (Enqueue, EnqueueWith) of n bytes is stored and of n+1 bytes is
// refused with ErrInvalidInput before any SQL runs (no statement logged,
// nothing written), the message naming the size and the limit; without
// the option the limit is DefaultMaxContentBytes; a limit outside
// 1..MaxContentBytesLimit is ErrInvalidConfig (Config.MaxContentBytes,
// and agentstore.WithMaxContentBytes on a StoreBackend, where 0 is tested
// too).
func testSessionsContentSizeLimit(t *testing.T, h *harness) {
	const limit = 1000
	var stmts stmtCounter
	st := h.New(t, withMaxContentBytes(limit), withStatementCount(&stmts))
	r, q := st.Sessions(), st.SessionQueue()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	content := func(n int) json.RawMessage { // a JSON string of exactly n bytes
		return json.RawMessage(`"` + strings.Repeat("x", n-2) + `"`)
	}
	refused := func(what string, size int, call func() error) {
		t.Helper()
		before := stmts.n.Load()
		err := call()
		if !errors.Is(err, agentstore.ErrInvalidInput) || !strings.Contains(err.Error(), strconv.Itoa(size)+" bytes") ||
			!strings.Contains(err.Error(), "limit is "+strconv.Itoa(limit)) {
			t.Fatalf("%s of %d bytes = %v, want ErrInvalidInput naming the size and the limit %d", what, size, err, limit)
		}
		if n := stmts.n.Load() - before; n != 0 {
			t.Fatalf("%s of %d bytes ran %d statements before it was refused, want none", what, size, n)
		}
	}
	refused("AppendMessages", limit+1, func() error {
		_, err := r.AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: content(limit + 1)})
		return err
	})
	refused("AppendMessagesWith", limit+1, func() error {
		_, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 1},
			repo.Message{Role: repo.RoleUser, Content: content(10)}, repo.Message{Role: repo.RoleUser, Content: content(limit + 1)})
		return err
	})
	fresh := repo.NewSession()
	fresh.AddMessage(repo.Message{ID: "big", Role: repo.RoleUser, Content: content(limit + 1)})
	refused("Save", limit+1, func() error { return r.Save(ctx, fresh) })
	refused("Enqueue", limit+1, func() error { _, err := q.Enqueue(ctx, s.ID, strings.Repeat("y", limit+1), 0); return err })
	refused("EnqueueWith", limit+1, func() error {
		_, err := q.EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: strings.Repeat("y", limit+1), IdempotencyKey: "k"})
		return err
	})
	if got := mustLoad(t, r, s.ID); got.MessageCount != 0 || got.Version != 1 {
		t.Fatalf("a refused write wrote: %d messages, version %d", got.MessageCount, got.Version)
	}
	if items, err := q.PendingQueue(ctx, s.ID); err != nil || len(items) != 0 {
		t.Fatalf("a refused enqueue wrote: %d items, %v", len(items), err)
	}
	if _, err := r.Load(ctx, fresh.ID); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("a refused Save wrote its session: %v", err)
	}
	// Exactly at the limit: stored.
	if _, err := r.AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: content(limit)}); err != nil {
		t.Fatalf("content of exactly the limit: %v", err)
	}
	if _, err := q.Enqueue(ctx, s.ID, strings.Repeat("y", limit), 0); err != nil {
		t.Fatalf("queue content of exactly the limit: %v", err)
	}
	// The default limit.
	def := h.Open(t)
	if _, err := def.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: content(agentstore.DefaultMaxContentBytes + 1)}); !errors.Is(err, agentstore.ErrInvalidInput) ||
		!strings.Contains(err.Error(), fmt.Sprintf("limit is %d", agentstore.DefaultMaxContentBytes)) {
		t.Fatalf("content above DefaultMaxContentBytes = %v, want ErrInvalidInput naming the limit", err)
	}
	if _, err := def.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: content(2 * limit)}); err != nil {
		t.Fatalf("content under the default limit: %v", err)
	}
	for _, n := range []int{-1, agentstore.MaxContentBytesLimit + 1} {
		if _, err := h.tryOpen(t, withMaxContentBytes(n)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Fatalf("Config.MaxContentBytes %d = %v, want ErrInvalidConfig", n, err)
		}
	}
	sb, ok := h.b.(StoreBackend)
	if !ok {
		t.Logf("the backend %T is no StoreBackend: agentstore.WithMaxContentBytes(0) is not tested", h.b)
		return
	}
	for _, n := range []int{0, -1, agentstore.MaxContentBytesLimit + 1} {
		if _, _, err := sb.OpenStore(t, agentstore.WithMaxContentBytes(n)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Fatalf("WithMaxContentBytes(%d) = %v, want ErrInvalidConfig", n, err)
		}
	}
}

// testSessionsMessageContentShape: message content must be a JSON array
// of content blocks or a JSON string, as documented: a number, an object,
// true, false or null is refused with ErrInvalidInput naming the message
// (AppendMessages and Save alike), and nothing is written; arrays and
// strings (with surrounding white space) are stored byte for byte.
func testSessionsMessageContentShape(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	for _, bad := range []string{`42`, `-1.5e3`, `{"type":"text","text":"x"}`, `true`, `false`, `null`, ` 42 `} {
		_, err := r.AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(bad)})
		if !errors.Is(err, agentstore.ErrInvalidInput) || !strings.Contains(err.Error(), "message 0 content") ||
			!strings.Contains(err.Error(), "JSON array") {
			t.Fatalf("AppendMessages of content %s = %v, want ErrInvalidInput naming message 0 and the JSON array", bad, err)
		}
		c := repo.NewSession()
		c.AddMessage(repo.Message{ID: "m", Role: repo.RoleUser, Content: json.RawMessage(bad)})
		if err := r.Save(ctx, c); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("Save of content %s = %v, want ErrInvalidInput", bad, err)
		}
	}
	if got := mustLoad(t, r, s.ID); got.MessageCount != 0 {
		t.Fatalf("refused content was written: %d messages", got.MessageCount)
	}
	good := []string{`[]`, `[{"type":"text","text":"hi"}]`, `"plain text"`, " \n[ {\"type\" : \"image\"} ] "}
	for _, g := range good {
		if _, err := r.AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(g)}); err != nil {
			t.Fatalf("content %q: %v", g, err)
		}
	}
	got := mustLoad(t, r, s.ID)
	for i, g := range good {
		if string(got.Messages[i].Content) != g {
			t.Fatalf("content %q read back as %q", g, got.Messages[i].Content)
		}
	}
}
