// Package testkit holds the test helpers that the exported conformance
// suite (agentstoretest) and the root package's own tests share: a settable
// clock, the provider test environment and its work items, events and
// metadata, the hostile identifier values, and the Verify report helpers.
// It is test support, not part of the library: it imports only public
// packages of this module and no test depends on another through it.
package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Clock is a settable clock for agentstore.WithClock: it starts at
// 2026-01-02 03:04:05 UTC and moves only when Advance is called.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock at 2026-01-02 03:04:05 UTC.
func NewClock() *Clock {
	return &Clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// String names the clock's time (for failure messages).
func (c *Clock) String() string { return fmt.Sprint(c.Now()) }

// TestLock is the lock timeout of the provider helpers' fetches.
const TestLock = 30 * time.Second

// ProviderEnv is one provider under test with its clock: the helpers below
// drive it and fail the test on an unexpected result.
type ProviderEnv struct {
	P     duroxide.Provider
	A     duroxide.ProviderAdmin
	Clock *Clock
	Ctx   context.Context
}

// Enqueue enqueues w for the orchestrator.
func (e *ProviderEnv) Enqueue(t testing.TB, w duroxide.WorkItem) {
	t.Helper()
	if err := e.P.EnqueueForOrchestrator(e.Ctx, w, 0); err != nil {
		t.Fatalf("enqueue %s: %v", w.WorkItemType(), err)
	}
}

// Fetch fetches an orchestration item (lock TestLock, no poll) and fails
// t when there is none.
func (e *ProviderEnv) Fetch(t testing.TB) *duroxide.OrchestrationItem {
	t.Helper()
	it, err := e.P.FetchOrchestrationItem(e.Ctx, TestLock, 0, nil)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if it == nil {
		t.Fatalf("fetch: got nothing, want an item")
	}
	return it
}

// FetchNone fails t unless a fetch (no poll) returns nothing.
func (e *ProviderEnv) FetchNone(t testing.TB) {
	t.Helper()
	it, err := e.P.FetchOrchestrationItem(e.Ctx, TestLock, 0, nil)
	if err != nil {
		t.Fatalf("fetch: %v", err)
	}
	if it != nil {
		t.Fatalf("fetch: got instance %s (%d messages), want nothing", it.Instance, len(it.Messages))
	}
}

// Ack acks it with a (its ExecutionID defaults to the item's).
func (e *ProviderEnv) Ack(t testing.TB, it *duroxide.OrchestrationItem, a duroxide.OrchestrationAck) {
	t.Helper()
	if a.ExecutionID == 0 {
		a.ExecutionID = it.ExecutionID
	}
	if err := e.P.AckOrchestrationItem(e.Ctx, it.LockToken, a); err != nil {
		t.Fatalf("ack %s: %v", it.Instance, err)
	}
}

// StartInstance enqueues a start, fetches it and acks the first turn
// (OrchestrationStarted, status Running, name+version).
func (e *ProviderEnv) StartInstance(t testing.TB, inst string, parent *string) {
	t.Helper()
	e.Enqueue(t, StartItem(inst, parent))
	it := e.Fetch(t)
	if it.Instance != inst {
		t.Fatalf("fetched %s, want %s", it.Instance, inst)
	}
	e.Ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{StartedEv(inst, 1, 1, parent)},
		Metadata:     RunningMeta(parent)})
}

// FinishInstance ends the current execution of inst with status through
// an external event turn; nextEvent is the id of the completion event.
func (e *ProviderEnv) FinishInstance(t testing.TB, inst, status string, nextEvent uint64) {
	t.Helper()
	e.Enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "go", Data: "x"})
	it := e.Fetch(t)
	if it.Instance != inst {
		t.Fatalf("fetched %s, want %s", it.Instance, inst)
	}
	e.Ack(t, it, duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{Ev(inst, it.ExecutionID, nextEvent, &duroxide.OrchestrationCompletedEvent{Output: "done"})},
		Metadata: duroxide.ExecutionMetadata{Status: Sp(status), Output: Sp("done")}})
}

// StartItem is the start of orchestration "Orch" 1.0.0 for inst.
func StartItem(inst string, parent *string) *duroxide.StartOrchestration {
	return &duroxide.StartOrchestration{Instance: inst, Orchestration: "Orch", Input: "{}", Version: Sp("1.0.0"), ParentInstance: parent, ExecutionID: 1}
}

// StartedEv is the OrchestrationStarted event of StartItem.
func StartedEv(inst string, exec, id uint64, parent *string) duroxide.Event {
	return Ev(inst, exec, id, &duroxide.OrchestrationStartedEvent{Name: "Orch", Version: "1.0.0", Input: "{}", ParentInstance: parent})
}

// Ev is event id of execution exec of inst, of kind k.
func Ev(inst string, exec, id uint64, k duroxide.EventKind) duroxide.Event {
	return duroxide.Event{EventID: id, InstanceID: inst, ExecutionID: exec, TimestampMS: 1, DuroxideVersion: "0.1.29", Kind: k}
}

// RunningMeta is the metadata of a first turn: Running, "Orch" 1.0.0.
func RunningMeta(parent *string) duroxide.ExecutionMetadata {
	return duroxide.ExecutionMetadata{Status: Sp(duroxide.StatusRunning), OrchestrationName: Sp("Orch"), OrchestrationVersion: Sp("1.0.0"), ParentInstanceID: parent}
}

// CompleteTurn is the ack of a one-turn orchestration: started + completed.
func CompleteTurn(oi *duroxide.OrchestrationItem) duroxide.OrchestrationAck {
	return duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{StartedEv(oi.Instance, 1, 1, nil), Ev(oi.Instance, 1, 2, &duroxide.OrchestrationCompletedEvent{Output: "ok"})},
		Metadata: duroxide.ExecutionMetadata{Status: Sp(duroxide.StatusCompleted), Output: Sp("ok"), OrchestrationName: Sp("Orch"),
			OrchestrationVersion: Sp("1.0.0")}}
}

// Sp returns a pointer to s.
func Sp(s string) *string { return &s }

// Activity is activity id "act" (input "in") of execution exec of inst.
func Activity(inst string, exec, id uint64) *duroxide.ActivityExecute {
	return &duroxide.ActivityExecute{Instance: inst, ExecutionID: exec, ID: id, Name: "act", Input: "in"}
}

// ProviderCycle runs one start turn with a worker item through p
// (enqueue, fetch, ack, worker fetch) and lists the instance through a.
func ProviderCycle(t testing.TB, p duroxide.Provider, a duroxide.ProviderAdmin) {
	t.Helper()
	ctx := context.Background()
	if err := p.EnqueueForOrchestrator(ctx, StartItem("i1", nil), 0); err != nil {
		t.Fatal(err)
	}
	it, err := p.FetchOrchestrationItem(ctx, TestLock, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %v %v", it, err)
	}
	if err := p.AckOrchestrationItem(ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{StartedEv("i1", 1, 1, nil)}, WorkerItems: []duroxide.WorkItem{Activity("i1", 1, 2)}, Metadata: RunningMeta(nil)}); err != nil {
		t.Fatal(err)
	}
	l, err := p.FetchWorkItem(ctx, TestLock, 0, nil, duroxide.TagFilter{})
	if err != nil || l == nil {
		t.Fatalf("worker fetch: %v %v", l, err)
	}
	if ids, err := a.ListInstances(ctx); err != nil || len(ids) != 1 {
		t.Fatalf("list = %v %v", ids, err)
	}
}

// WantErr fails t unless err matches target, is a *duroxide.ProviderError
// and is permanent (not retryable).
func WantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error = %v, want errors.Is %v", err, target)
	}
	var pe *duroxide.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *duroxide.ProviderError", err)
	}
	if pe.Retryable || errors.Is(err, repo.ErrRetryable) {
		t.Fatalf("error %v is retryable, want permanent", err)
	}
}

// TextMsg returns a message of role with one text block.
func TextMsg(id string, role repo.Role, text string) repo.Message {
	b, _ := json.Marshal([]map[string]string{{"type": "text", "text": text}})
	return repo.Message{ID: id, Role: role, Content: b}
}

// Outcome summarises an operation's result for comparison: whether it
// found anything and which sentinel its error matches.
func Outcome(found bool, err error) string {
	switch {
	case err == nil:
		return fmt.Sprintf("ok(found=%v)", found)
	case errors.Is(err, repo.ErrNotFound):
		return "ErrNotFound"
	case errors.Is(err, repo.ErrLockLost):
		return "ErrLockLost"
	case errors.Is(err, repo.ErrInvalidInput):
		return "ErrInvalidInput"
	case errors.Is(err, repo.ErrConflict):
		return "ErrConflict"
	}
	return "error: " + err.Error()
}

// HostileValue is one hostile string with a short name for messages.
type HostileValue struct {
	Name string
	V    string
}

// HostileValues are tried everywhere an id, tenant, key or name is accepted.
func HostileValues() []HostileValue {
	return []HostileValue{
		{"single quote", "it's"},
		{"double quote", `say "hi"`},
		{"drop table", `x'; DROP TABLE agentstore_sessions; --`},
		{"drop table dq", `x"; DROP TABLE "agentstore_history"; --`},
		{"backslashes", `C:\path\n\u0000\x00`},
		{"like wildcards", `100%_done*`},
		{"unicode", "Grüße 🙂 中文 \u202e"},
		{"10 KB", strings.Repeat("0123456789", 1024)},
		{"invalid UTF-8", "bad\xff\xfe\xc3\x28"},
		{"NUL byte", "nul\x00byte"},
		{"only NUL", "\x00"},
		{"newlines", "a\r\nb\tc"},
	}
}

// VerifyClean fails t unless Verify reports zero issues on st.
func VerifyClean(t testing.TB, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	rep := MustVerify(t, st)
	if !rep.OK() {
		t.Fatalf("Verify found %d issues on a %s schema that should be clean:\n%s", len(rep.Issues), st.Dialect(), rep)
	}
	return rep
}

// MustVerify returns Verify's report on st, failing t on an error.
func MustVerify(t testing.TB, st *agentstore.Store) *agentstore.VerifyReport {
	t.Helper()
	rep, err := st.Verify(context.Background())
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	return rep
}

// IssueKeys renders the issues as sorted "kind table object" lines.
func IssueKeys(issues []agentstore.SchemaIssue) []string {
	out := make([]string, 0, len(issues))
	for _, i := range issues {
		out = append(out, fmt.Sprintf("%s %s %s", i.Kind, i.Table, i.Object))
	}
	sort.Strings(out)
	return out
}
