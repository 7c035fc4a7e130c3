package agentstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// sessionsTests are the Sessions area's tests of this file.
func sessionsTests() []test {
	return tests(
		test{"SessionsSaveLoadRoundTrip", testSessionsSaveLoadRoundTrip},
		test{"SessionsSubagentRoundTrip", testSessionsSubagentRoundTrip},
		test{"SessionsLoadMissingIsNotFound", testSessionsLoadMissingIsNotFound},
		test{"SessionsSummaries", testSessionsSummaries},
	)
}

// testSessionsSaveLoadRoundTrip: Save then Load returns every field of the
// aggregate: the session row (tenant, state, config, permissions, summary,
// cost, tokens, expiry), message content byte for byte (unknown block types,
// odd spacing), usage, metadata, environment, model and request id, the
// parent/leaf tree, compaction records, todos and the draft plan; Save sets
// version, last seq and message count.
func testSessionsSaveLoadRoundTrip(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()

	s := repo.NewSession()
	s.TenantID = "acme"
	s.State = repo.StateActive
	s.Config = json.RawMessage(`{"model":"claude-sonnet-4-5","max_tokens":16384,"ttl_secs":3600}`)
	s.Permissions = json.RawMessage(`{"mode":"accept_edits","allow":["Read"]}`)
	sum, hash, e := "so far", "abc123", "none"
	s.Summary, s.StaticContextHash, s.Error = &sum, &hash, &e
	s.TotalCostUSD = decimal.RequireFromString("0.123456789")
	s.CurrentInputTokens = 77
	exp := clock.Now().Add(time.Hour)
	s.ExpiresAt = &exp
	// Unknown block types and odd spacing must survive byte for byte.
	raw := json.RawMessage(`[ {"type":"future_block","z":1,  "a":[true,null]}, {"type":"text","text":"hi ✓"} ]`)
	model, req := "claude-sonnet-4-5", "req_1"
	m1 := repo.Message{ID: "m1", Role: repo.RoleUser, Content: raw,
		Usage:       &repo.TokenUsage{InputTokens: 10, OutputTokens: 2, CacheReadInputTokens: 5, CacheCreationInputTokens: 7},
		Metadata:    json.RawMessage(`{"model":"claude-sonnet-4-5","tool_results":[{"tool_use_id":"t","is_error":false}]}`),
		Environment: json.RawMessage(`{"cwd":"/tmp","platform":"linux"}`), Model: &model, RequestID: &req}
	s.AddMessage(m1)
	s.AddMessage(textMsg("m2", repo.RoleAssistant, "hello"))
	s.CompactHistory = []repo.CompactRecord{{Trigger: repo.TriggerThreshold, PreTokens: 1 << 40, PostTokens: 10,
		SavedTokens: 1<<40 - 10, Summary: "compacted", OriginalCount: 5, NewCount: 1}}
	s.Todos = []repo.TodoItem{{Content: "write tests", ActiveForm: "writing tests", Status: repo.TodoInProgress},
		{Content: "ship", ActiveForm: "shipping"}}
	s.EnterPlanMode("p1", "1. do it", clock.Now())
	mustSave(t, r, s)
	if s.Version != 1 || s.LastSeq != 2 || s.MessageCount != 2 {
		t.Fatalf("after save: version %d lastSeq %d count %d, want 1 2 2", s.Version, s.LastSeq, s.MessageCount)
	}

	got := mustLoad(t, r, s.ID)
	if got.TenantID != "acme" || got.State != repo.StateActive || got.Type.Kind != repo.KindMain {
		t.Fatalf("row fields: tenant %q state %q kind %q", got.TenantID, got.State, got.Type.Kind)
	}
	if string(got.Messages[0].Content) != string(raw) {
		t.Fatalf("content not byte for byte:\n got %s\nwant %s", got.Messages[0].Content, raw)
	}
	if *got.Messages[0].Usage != *m1.Usage || got.TotalUsage.CacheCreationInputTokens != 7 || got.TotalUsage.CacheReadInputTokens != 5 {
		t.Fatalf("usage lost: %+v total %+v", got.Messages[0].Usage, got.TotalUsage)
	}
	if got.Messages[1].ParentID == nil || *got.Messages[1].ParentID != "m1" || *got.CurrentLeafID != "m2" {
		t.Fatalf("tree: parent %v leaf %v", got.Messages[1].ParentID, got.CurrentLeafID)
	}
	if !got.TotalCostUSD.Equal(s.TotalCostUSD) || got.CurrentInputTokens != 77 || *got.Summary != sum || *got.StaticContextHash != hash {
		t.Fatalf("row values: cost %s cur %d", got.TotalCostUSD, got.CurrentInputTokens)
	}
	if got.ExpiresAt == nil || !got.ExpiresAt.Equal(exp) || !got.CreatedAt.Equal(clock.Now()) {
		t.Fatalf("times: expires %v created %v", got.ExpiresAt, got.CreatedAt)
	}
	if *got.Messages[0].Model != model || *got.Messages[0].RequestID != req || string(got.Messages[0].Environment) == "" {
		t.Fatal("message model/request/environment lost")
	}
	if len(got.CompactHistory) != 1 || got.CompactHistory[0].PreTokens != 1<<40 || got.CompactHistory[0].Trigger != repo.TriggerThreshold {
		t.Fatalf("compacts: %+v", got.CompactHistory)
	}
	if len(got.Todos) != 2 || got.Todos[0].Content != "write tests" || got.Todos[1].Status != repo.TodoPending {
		t.Fatalf("todos: %+v", got.Todos)
	}
	if got.CurrentPlan == nil || got.CurrentPlan.Status != repo.PlanDraft || !got.IsInPlanMode() {
		t.Fatalf("plan: %+v", got.CurrentPlan)
	}
	if got.Version != 1 || got.LastSeq != 2 {
		t.Fatalf("loaded version %d lastSeq %d", got.Version, got.LastSeq)
	}
	_ = ctx
}

// testSessionsSubagentRoundTrip: a subagent session keeps its type and
// parent through Save and Load, ListChildren lists it under its parent, and
// the parent still loads as a main session.
func testSessionsSubagentRoundTrip(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	parent := repo.NewSession()
	mustSave(t, r, parent)
	child := repo.NewSubagentSession(parent.ID, "code-reviewer", "Reviews the diff for defects; a long description that is well over thirty-two characters")
	mustSave(t, r, child)
	got := mustLoad(t, r, child.ID)
	if !got.IsSubagent() || got.Type != child.Type || got.ParentID == nil || *got.ParentID != parent.ID {
		t.Fatalf("subagent lost: %+v parent %v", got.Type, got.ParentID)
	}
	kids, err := r.ListChildren(context.Background(), parent.ID)
	if err != nil || len(kids) != 1 || kids[0] != child.ID {
		t.Fatalf("ListChildren = %v, %v", kids, err)
	}
	if m := mustLoad(t, r, parent.ID); m.IsSubagent() {
		t.Fatal("main session loaded as subagent")
	}
}

// testSessionsLoadMissingIsNotFound: every session operation on an id that
// was never stored is ErrNotFound (Delete reports false, nil), saving a
// versioned session that was never stored is ErrNotFound, and inserting an
// existing id is ErrConflict.
func testSessionsLoadMissingIsNotFound(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	ctx := context.Background()
	r := st.Sessions()
	id := uuid.New()
	if _, err := r.Load(ctx, id); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("Load missing = %v, want ErrNotFound", err)
	}
	if _, err := r.AppendMessages(ctx, id, textMsg("a", repo.RoleUser, "x")); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("AppendMessages missing = %v, want ErrNotFound", err)
	}
	if _, err := r.Fork(ctx, id, ""); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("Fork missing = %v, want ErrNotFound", err)
	}
	if _, err := r.GetSummaries(ctx, id); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("GetSummaries missing = %v, want ErrNotFound", err)
	}
	if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: id, Summary: "x"}); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("AddSummary missing = %v, want ErrNotFound", err)
	}
	if _, err := r.SetTodos(ctx, id, nil); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("SetTodos missing = %v, want ErrNotFound", err)
	}
	ok, err := r.Delete(ctx, id)
	if err != nil || ok {
		t.Fatalf("Delete missing = %v, %v; want false, nil", ok, err)
	}
	// Saving a session with a version that was never stored is not found.
	s := repo.NewSession()
	s.ID, s.Version = id, 3
	if err := r.Save(ctx, s); !errors.Is(err, agentstore.ErrNotFound) {
		t.Fatalf("Save of unknown versioned session = %v, want ErrNotFound", err)
	}
	// Inserting an existing id is a conflict.
	s2 := repo.NewSession()
	mustSave(t, r, s2)
	dup := repo.NewSession()
	dup.ID = s2.ID
	if err := r.Save(ctx, dup); !errors.Is(err, agentstore.ErrConflict) {
		t.Fatalf("Save duplicate id = %v, want ErrConflict", err)
	}
}

// testSessionsSummaries: AddSummary stores snapshots that GetSummaries
// returns oldest first, sets the session's summary to the latest and bumps
// its version per snapshot, so a copy loaded before them is stale
// (ErrConflict).
func testSessionsSummaries(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	mustSave(t, r, s)
	for i := range 3 {
		leaf := fmt.Sprintf("m%d", i)
		if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: fmt.Sprintf("summary %d", i), LeafMessageID: &leaf}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	got, err := r.GetSummaries(ctx, s.ID)
	if err != nil || len(got) != 3 {
		t.Fatalf("GetSummaries = %d, %v", len(got), err)
	}
	for i, g := range got {
		if g.Summary != fmt.Sprintf("summary %d", i) || *g.LeafMessageID != fmt.Sprintf("m%d", i) {
			t.Fatalf("summary %d = %+v (not oldest first)", i, g)
		}
	}
	loaded := mustLoad(t, r, s.ID)
	if loaded.Summary == nil || *loaded.Summary != "summary 2" || loaded.Version != s.Version+3 {
		t.Fatalf("session summary %v version %d", loaded.Summary, loaded.Version)
	}
	// The copy saved before the summaries is stale now.
	s.State = repo.StateActive
	if err := r.Save(ctx, s); !errors.Is(err, agentstore.ErrConflict) {
		t.Fatalf("stale save after AddSummary = %v, want ErrConflict", err)
	}
}
