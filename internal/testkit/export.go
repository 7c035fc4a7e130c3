package testkit

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// TransferStore is what PopulateTransfer writes through: an agentstore
// Store or a conformance-suite handle.
type TransferStore interface {
	Sessions() repo.Sessions
	SessionQueue() repo.SessionQueue
	Provider() duroxide.Provider
}

// Populated is what PopulateTransfer wrote.
type Populated struct {
	// Sessions are the sessions by tenant ("" = none), roots first; Fork
	// is the fork of the first "acme" session, BigCost a session's exact
	// cost with its scale.
	Sessions  map[string][]uuid.UUID
	Fork      uuid.UUID
	BigCost   decimal.Decimal
	Messages  int
	Instances []string
	// Loose is the instance id of an orchestrator message with no
	// instance row yet (a start not fetched).
	Loose string
}

// TransferCost is the exact cost (scale kept) PopulateTransfer gives the
// first session of each tenant.
const TransferCost = "12345678901234567890.123456789012345678900"

// PopulateTransfer fills st with data of both domains for the export and
// import tests: for tenants "acme", "globex" and none, perTenant sessions
// each with messages (content with odd spacing, newlines, unicode and
// HTML characters kept byte for byte; usage, metadata and environment with
// numbers written non-canonically), a compaction, a summary, todos, a
// plan, queue items (pending, leased, completed); a fork of the first
// "acme" session; two provider instances (one completed with key-value
// entries, one running with a pending activity) and a start message for a
// third instance not fetched yet. Every write goes through the public
// API; the clock is the store's.
func PopulateTransfer(t testing.TB, st TransferStore, clock *Clock, perTenant int) Populated {
	t.Helper()
	ctx := context.Background()
	r, q := st.Sessions(), st.SessionQueue()
	out := Populated{Sessions: map[string][]uuid.UUID{}, BigCost: decimal.RequireFromString(TransferCost)}
	for _, tenant := range []string{"acme", "globex", ""} {
		for i := 0; i < perTenant; i++ {
			s := repo.NewSession()
			s.TenantID = tenant
			s.State = repo.StateActive
			s.Config = json.RawMessage(`{"model": "m", "temperature": 0.50, "n": 1e2, "z": [1, 2.0], "a": {"y": null, "x": true}}`)
			s.Permissions = json.RawMessage(`{"allow":["Read"],"mode":"ask"}`)
			s.TotalCostUSD = decimal.RequireFromString("0.10")
			if i == 0 {
				s.TotalCostUSD = out.BigCost
			}
			content := json.RawMessage("[\n  {\"type\": \"text\", \"text\": \"héllo <b>&amp;</b> \\u00e9 ✓\"},\n {\"type\":\"future_block\",\"n\":1.50}\n]")
			model := "claude-sonnet-4-5"
			s.AddMessage(repo.Message{ID: fmt.Sprintf("m%d-0", i), Role: repo.RoleUser, Content: content,
				Usage:       &repo.TokenUsage{InputTokens: 10, OutputTokens: 2, CacheReadInputTokens: 3},
				Metadata:    json.RawMessage(`{"b": 2.10, "a": "x"}`),
				Environment: json.RawMessage(`{"cwd":"/tmp"}`), Model: &model})
			s.AddMessage(TextMsg(fmt.Sprintf("m%d-1", i), repo.RoleAssistant, "reply "+tenant))
			s.CompactHistory = []repo.CompactRecord{{Trigger: repo.TriggerThreshold, PreTokens: 1 << 40, PostTokens: 10,
				SavedTokens: 1<<40 - 10, Summary: "compacted", OriginalCount: 5, NewCount: 1}}
			s.Todos = []repo.TodoItem{{Content: "write tests", ActiveForm: "writing tests", Status: repo.TodoInProgress},
				{Content: "ship", ActiveForm: "shipping"}}
			s.EnterPlanMode("p", "1. do it", clock.Now())
			if err := r.Save(ctx, s); err != nil {
				t.Fatalf("populate: save: %v", err)
			}
			clock.Advance(time.Millisecond)
			if _, err := r.AppendMessages(ctx, s.ID, TextMsg(fmt.Sprintf("m%d-2", i), repo.RoleUser, "more\nlines\ttab")); err != nil {
				t.Fatalf("populate: append: %v", err)
			}
			out.Messages += 3
			leaf := fmt.Sprintf("m%d-2", i)
			if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: "so far", LeafMessageID: &leaf}); err != nil {
				t.Fatalf("populate: summary: %v", err)
			}
			for j, c := range []string{"first", "second", "third"} {
				if _, err := q.EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: c, Priority: int32(j % 2), IdempotencyKey: c}); err != nil {
					t.Fatalf("populate: enqueue: %v", err)
				}
			}
			it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w1", Lease: time.Minute})
			if err != nil || it == nil {
				t.Fatalf("populate: dequeue: %v %v", it, err)
			}
			if err := q.Complete(ctx, it.Lease()); err != nil {
				t.Fatalf("populate: complete: %v", err)
			}
			if it, err = q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: "w2", Lease: time.Hour}); err != nil || it == nil {
				t.Fatalf("populate: dequeue: %v %v", it, err)
			}
			out.Sessions[tenant] = append(out.Sessions[tenant], s.ID)
			clock.Advance(time.Millisecond)
		}
	}
	if perTenant > 0 {
		f, err := r.Fork(ctx, out.Sessions["acme"][0], "m0-1")
		if err != nil {
			t.Fatalf("populate: fork: %v", err)
		}
		out.Fork = f.ID
		out.Sessions["acme"] = append(out.Sessions["acme"], f.ID)
		out.Messages += 2
	}
	// Provider: a completed instance with key-value entries, a running one
	// with a pending activity, a start not fetched yet.
	e := &ProviderEnv{P: st.Provider(), Clock: clock, Ctx: ctx}
	e.Enqueue(t, StartItem("inst-done", nil))
	it := e.Fetch(t)
	e.Ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{StartedEv("inst-done", 1, 1, nil),
		Ev("inst-done", 1, 2, &duroxide.KeyValueSetEvent{Key: "k1", Value: "v1", LastUpdatedAtMS: 111}),
		Ev("inst-done", 1, 3, &duroxide.KeyValueSetEvent{Key: "Z-key ✓", Value: "", LastUpdatedAtMS: 0}),
		Ev("inst-done", 1, 4, &duroxide.OrchestrationCompletedEvent{Output: "ok"})},
		Metadata: duroxide.ExecutionMetadata{Status: Sp(duroxide.StatusCompleted), Output: Sp("ok"), OrchestrationName: Sp("Orch"),
			OrchestrationVersion: Sp("1.0.0")}})
	clock.Advance(time.Millisecond)
	e.Enqueue(t, StartItem("inst-run", nil))
	it = e.Fetch(t)
	e.Ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{StartedEv("inst-run", 1, 1, nil),
		Ev("inst-run", 1, 2, &duroxide.KeyValueSetEvent{Key: "draft", Value: "d", LastUpdatedAtMS: 5})},
		WorkerItems: []duroxide.WorkItem{Activity("inst-run", 1, 3)}, Metadata: RunningMeta(nil)})
	clock.Advance(time.Millisecond)
	e.Enqueue(t, StartItem("inst-later", nil))
	out.Instances = []string{"inst-done", "inst-run"}
	out.Loose = "inst-later"
	return out
}

// AppendBulk appends n messages to session id in batches of 500, each with
// about size bytes of text content.
func AppendBulk(t testing.TB, r repo.Sessions, id uuid.UUID, n, size int) {
	t.Helper()
	ctx := context.Background()
	text := make([]byte, size)
	for i := range text {
		text[i] = 'a' + byte(i%26)
	}
	for done := 0; done < n; {
		k := min(500, n-done)
		batch := make([]repo.Message, k)
		for i := range batch {
			batch[i] = TextMsg(fmt.Sprintf("b%d", done+i), repo.RoleUser, string(text))
		}
		if _, err := r.AppendMessages(ctx, id, batch...); err != nil {
			t.Fatalf("append bulk at %d: %v", done, err)
		}
		done += k
	}
}
