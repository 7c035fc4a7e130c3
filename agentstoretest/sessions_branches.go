package agentstoretest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/agentstore/agentstore/repo"
)

// sessionsBranchesTests are the Sessions area's tests of edit and rewind
// (Rewind, AppendOptions.SiblingOf, Branches, LoadBranch).
func sessionsBranchesTests() []test {
	return []test{
		{"SessionsRewindMovesLeafKeepsEverything", testSessionsRewindMovesLeafKeepsEverything},
		{"SessionsRewindVersionedAndIdempotent", testSessionsRewindVersionedAndIdempotent},
		{"SessionsEditAppendsSibling", testSessionsEditAppendsSibling},
		{"SessionsEditIdempotentAndStrict", testSessionsEditIdempotentAndStrict},
		{"SessionsBranchesCompactionCyclesDangling", testSessionsBranchesCompactionCyclesDangling},
		{"SessionsLoadBranchOptions", testSessionsLoadBranchOptions},
		{"SessionsBranchErrors", testSessionsBranchErrors},
		{"SessionsBranchTenantIsolation", testSessionsBranchTenantIsolation},
		{"SessionsConcurrentRewindsAndAppends", testSessionsConcurrentRewindsAndAppends},
	}
}

// brConversation saves a session and appends u1 a1 u2 a2 (one path).
func brConversation(t *testing.T, r repo.Sessions, s *repo.Session) {
	t.Helper()
	mustSave(t, r, s)
	if _, err := r.AppendMessages(context.Background(), s.ID,
		textMsg("u1", repo.RoleUser, "hello"), textMsg("a1", repo.RoleAssistant, "hi"),
		textMsg("u2", repo.RoleUser, "write a poem"), textMsg("a2", repo.RoleAssistant, "roses are red")); err != nil {
		t.Fatalf("append the conversation: %v", err)
	}
}

// brBranches returns Branches as "leaf(root,length,fork)" strings, the
// current one marked with a *.
func brBranches(t *testing.T, r repo.Sessions, id uuid.UUID) []string {
	t.Helper()
	bs, err := r.Branches(context.Background(), id)
	if err != nil {
		t.Fatalf("branches of %s: %v", id, err)
	}
	out := make([]string, 0, len(bs))
	for i, b := range bs {
		if i > 0 && bs[i-1].LeafSeq >= b.LeafSeq {
			t.Errorf("branches not in leaf seq order: %+v", bs)
		}
		if b.LeafCreatedAt.IsZero() || b.LeafCreatedAt.Location() != time.UTC {
			t.Errorf("branch %s: leaf created at %v", b.LeafID, b.LeafCreatedAt)
		}
		s := fmt.Sprintf("%s(%s,%d,%s)", b.LeafID, b.RootID, b.Length, b.ForkPointID)
		if b.Current {
			s += "*"
		}
		out = append(out, s)
	}
	return out
}

// brPath returns LoadBranch's message ids.
func brPath(t *testing.T, r repo.Sessions, id uuid.UUID, leaf string, opts ...repo.LoadOptions) []string {
	t.Helper()
	ms, err := r.LoadBranch(context.Background(), id, leaf, opts...)
	if err != nil {
		t.Fatalf("load branch %s of %s: %v", leaf, id, err)
	}
	return msgIDs(ms)
}

// brState is what a session holds besides its messages, current leaf,
// version and updated_at: every field of the row set at creation or by
// other writes (exported fields only, as JSON).
func brState(t *testing.T, s *repo.Session) string {
	t.Helper()
	c := *s
	c.Messages, c.CurrentLeafID, c.Version, c.UpdatedAt = nil, nil, 0, time.Time{}
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func brCurrent(t *testing.T, r repo.Sessions, id uuid.UUID) []string {
	t.Helper()
	return msgIDs(mustLoad(t, r, id, repo.LoadOptions{CurrentBranch: true}).Messages)
}

// testSessionsRewindMovesLeafKeepsEverything: Rewind makes an earlier
// message the current leaf and writes nothing else: every message stays
// (count, last seq, token totals), the state set at creation (tenant, type,
// state, config, permissions, summary, hash, expiry, cost, error) and the
// todos, plan, compaction records and summaries are kept; the version is
// bumped and updated_at moves to the clock. The next append continues from
// the new leaf, the old continuation stays readable as a branch, Fork ""
// copies the rewound branch, and a Rewind to the old leaf returns to it.
func testSessionsRewindMovesLeafKeepsEverything(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	parent := repo.NewSession()
	mustSave(t, r, parent)
	s := repo.NewSubagentSession(parent.ID, "coder", "writes code")
	s.TenantID = "acme"
	s.State = repo.StateActive
	s.Config = json.RawMessage(`{"model":"m","temperature":0.5}`)
	s.Permissions = json.RawMessage(`{"allow":["read"]}`)
	sum, hash, fail := "so far", "abc123", "an earlier error"
	s.Summary, s.StaticContextHash, s.Error = &sum, &hash, &fail
	exp := clock.Now().Add(48 * time.Hour)
	s.ExpiresAt = &exp
	s.TotalCostUSD = decimal.RequireFromString("1.2500")
	s.Todos = []repo.TodoItem{{Content: "test it", ActiveForm: "testing it", Status: repo.TodoPending}}
	s.EnterPlanMode("plan", "the plan", clock.Now())
	s.CompactHistory = []repo.CompactRecord{{Trigger: repo.TriggerAuto, PreTokens: 10, PostTokens: 5, Summary: "c"}}
	brConversation(t, r, s)
	a2 := "a2"
	if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: "on a2", LeafMessageID: &a2}); err != nil {
		t.Fatal(err)
	}
	before := mustLoad(t, r, s.ID)

	clock.Advance(time.Minute)
	v, err := r.Rewind(ctx, s.ID, "a1", repo.RewindOptions{})
	if err != nil {
		t.Fatalf("rewind to a1: %v", err)
	}
	after := mustLoad(t, r, s.ID)
	if v != before.Version+1 || after.Version != v || after.CurrentLeafID == nil || *after.CurrentLeafID != "a1" ||
		!after.UpdatedAt.Equal(clock.Now()) {
		t.Fatalf("after rewind: returned version %d, stored %d (was %d), leaf %v, updated %v (clock %v)",
			v, after.Version, before.Version, after.CurrentLeafID, after.UpdatedAt, clock.Now())
	}
	if got, want := brState(t, after), brState(t, before); got != want {
		t.Fatalf("rewind changed the session besides leaf and version:\n got %s\nwant %s", got, want)
	}
	if !slices.Equal(msgIDs(after.Messages), []string{"u1", "a1", "u2", "a2"}) || after.MessageCount != 4 || after.LastSeq != 4 {
		t.Fatalf("rewind changed the messages: %v, count %d, last seq %d", msgIDs(after.Messages), after.MessageCount, after.LastSeq)
	}
	if sums, err := r.GetSummaries(ctx, s.ID); err != nil || len(sums) != 1 || *sums[0].LeafMessageID != "a2" {
		t.Fatalf("summaries after rewind: %+v, %v", sums, err)
	}
	if got := brCurrent(t, r, s.ID); !slices.Equal(got, []string{"u1", "a1"}) {
		t.Fatalf("current branch after rewind = %v", got)
	}
	// The current leaf has children now: its branch is listed with the old one.
	if got, want := brBranches(t, r, s.ID), []string{"a1(u1,2,a1)*", "a2(u1,4,a1)"}; !slices.Equal(got, want) {
		t.Fatalf("branches after rewind = %v, want %v", got, want)
	}

	// Regenerate: the next append hangs under a1; the old reply stays.
	got, err := r.AppendMessages(ctx, s.ID, textMsg("u2b", repo.RoleUser, "write a haiku"))
	if err != nil || got[0].ParentID == nil || *got[0].ParentID != "a1" || got[0].Seq != 5 {
		t.Fatalf("append after rewind = %+v, %v", got, err)
	}
	if got, want := brBranches(t, r, s.ID), []string{"a2(u1,4,a1)", "u2b(u1,3,u2b)*"}; !slices.Equal(got, want) {
		t.Fatalf("branches after the new reply = %v, want %v", got, want)
	}
	if got := brPath(t, r, s.ID, "a2"); !slices.Equal(got, []string{"u1", "a1", "u2", "a2"}) {
		t.Fatalf("LoadBranch(a2) = %v", got)
	}
	f, err := r.Fork(ctx, s.ID, "")
	if err != nil || !slices.Equal(msgIDs(f.Messages), []string{"u1", "a1", "u2b"}) {
		t.Fatalf("fork of the rewound branch = %v, %v", f, err)
	}
	// Back to the old branch.
	if _, err := r.Rewind(ctx, s.ID, "a2", repo.RewindOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := brCurrent(t, r, s.ID); !slices.Equal(got, []string{"u1", "a1", "u2", "a2"}) {
		t.Fatalf("current branch after rewinding to a2 = %v", got)
	}
	final := mustLoad(t, r, s.ID)
	if final.MessageCount != 5 || final.TotalUsage != before.TotalUsage || !final.TotalCostUSD.Equal(before.TotalCostUSD) ||
		final.State != repo.StateActive || string(final.Config) == "" || final.Type.AgentType != "coder" {
		t.Fatalf("final session: %+v", final)
	}
}

// testSessionsRewindVersionedAndIdempotent: a strict Rewind at a stale
// version is a *StaleVersionError carrying the stored version and writes
// nothing; at the stored version it moves the leaf and returns version+1; a
// retry of it (its first attempt landed), or any Rewind to the current leaf,
// writes nothing and returns the stored version; a Save of a struct loaded
// before a rewind is stale; Rewind inside WithSessionLock commits or rolls
// back with the function.
func testSessionsRewindVersionedAndIdempotent(t *testing.T, h *harness) {
	st, clock := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	brConversation(t, r, s)
	loaded := mustLoad(t, r, s.ID)
	v0 := loaded.Version

	_, err := r.Rewind(ctx, s.ID, "u1", repo.RewindOptions{ExpectedVersion: v0 - 1})
	var sv *repo.StaleVersionError
	if !errors.As(err, &sv) || sv.Stored != v0 || sv.Expected != v0-1 || !errors.Is(err, repo.ErrStaleVersion) || !errors.Is(err, repo.ErrConflict) {
		t.Fatalf("stale rewind: %v", err)
	}
	checkCleanErr(t, "stale rewind", err, s.ID.String())
	if now := mustLoad(t, r, s.ID); now.Version != v0 || *now.CurrentLeafID != "a2" || !now.UpdatedAt.Equal(loaded.UpdatedAt) {
		t.Fatalf("a stale rewind wrote: version %d leaf %s", now.Version, *now.CurrentLeafID)
	}
	clock.Advance(time.Second)
	v1, err := r.Rewind(ctx, s.ID, "u1", repo.RewindOptions{ExpectedVersion: v0})
	if err != nil || v1 != v0+1 {
		t.Fatalf("strict rewind = %d, %v (version was %d)", v1, err, v0)
	}
	// The retry of that call (its reply lost) and a plain no-op: nothing written.
	clock.Advance(time.Second)
	for _, o := range []repo.RewindOptions{{ExpectedVersion: v0}, {}} {
		v, err := r.Rewind(ctx, s.ID, "u1", o)
		if err != nil || v != v1 {
			t.Fatalf("rewind to the current leaf (%+v) = %d, %v; want %d", o, v, err, v1)
		}
	}
	now := mustLoad(t, r, s.ID)
	if now.Version != v1 || !now.UpdatedAt.Equal(clock.Now().Add(-time.Second)) {
		t.Fatalf("a rewind to the current leaf wrote: version %d (want %d), updated %v", now.Version, v1, now.UpdatedAt)
	}
	// A struct loaded before the rewind is stale.
	loaded.State = repo.StateCompleted
	if err := r.Save(ctx, loaded); !errors.Is(err, repo.ErrStaleVersion) {
		t.Fatalf("save of a struct loaded before a rewind = %v", err)
	}

	// In WithSessionLock: rolled back with the function's error, kept when it returns nil.
	boom := errors.New("boom")
	err = r.WithSessionLock(ctx, s.ID, func(ctx context.Context, tx repo.Sessions) error {
		if _, err := tx.Rewind(ctx, s.ID, "a2", repo.RewindOptions{}); err != nil {
			return err
		}
		if bs, err := tx.Branches(ctx, s.ID); err != nil || len(bs) != 1 || !bs[0].Current || bs[0].LeafID != "a2" {
			return fmt.Errorf("branches in the transaction: %+v, %v", bs, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("WithSessionLock = %v", err)
	}
	if now := mustLoad(t, r, s.ID); *now.CurrentLeafID != "u1" || now.Version != v1 {
		t.Fatalf("rolled-back rewind left leaf %s version %d", *now.CurrentLeafID, now.Version)
	}
	if err := r.WithSessionLock(ctx, s.ID, func(ctx context.Context, tx repo.Sessions) error {
		_, err := tx.Rewind(ctx, s.ID, "a2", repo.RewindOptions{ExpectedVersion: v1})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if now := mustLoad(t, r, s.ID); *now.CurrentLeafID != "a2" || now.Version != v1+1 {
		t.Fatalf("committed rewind: leaf %s version %d", *now.CurrentLeafID, now.Version)
	}
}

// testSessionsEditAppendsSibling: AppendMessagesWith with SiblingOf stores
// its first message under the edited message's parent (a root's sibling as
// a root), chains the rest after it, makes the last the current leaf,
// counts its usage, and keeps the edited message and its descendants on
// their branch.
func testSessionsEditAppendsSibling(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	brConversation(t, r, s)
	before := mustLoad(t, r, s.ID)

	// Edit u2 and regenerate the reply, in one batch.
	edit := textMsg("u2e", repo.RoleUser, "write a limerick")
	reply := textMsg("a2e", repo.RoleAssistant, "there once was")
	reply.Usage = &repo.TokenUsage{InputTokens: 7, OutputTokens: 3}
	got, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "u2"}, edit, reply)
	if err != nil {
		t.Fatalf("edit u2: %v", err)
	}
	if len(got) != 2 || got[0].ParentID == nil || *got[0].ParentID != "a1" || got[1].ParentID == nil || *got[1].ParentID != "u2e" ||
		got[0].Seq != 5 || got[1].Seq != 6 {
		t.Fatalf("edit returned %+v", got)
	}
	after := mustLoad(t, r, s.ID)
	if *after.CurrentLeafID != "a2e" || after.Version != before.Version+1 || after.MessageCount != 6 ||
		after.TotalUsage.InputTokens != before.TotalUsage.InputTokens+7 {
		t.Fatalf("after the edit: leaf %s version %d (was %d) count %d usage %+v", *after.CurrentLeafID, after.Version,
			before.Version, after.MessageCount, after.TotalUsage)
	}
	if got := brCurrent(t, r, s.ID); !slices.Equal(got, []string{"u1", "a1", "u2e", "a2e"}) {
		t.Fatalf("current branch after the edit = %v", got)
	}
	if got, want := brBranches(t, r, s.ID), []string{"a2(u1,4,a1)", "a2e(u1,4,a2e)*"}; !slices.Equal(got, want) {
		t.Fatalf("branches after the edit = %v, want %v", got, want)
	}
	// Edit the edit's reply alone (a sibling of a2e: parent u2e).
	if got, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "a2e"}, textMsg("a2f", repo.RoleAssistant, "a haiku")); err != nil ||
		*got[0].ParentID != "u2e" {
		t.Fatalf("edit a2e = %+v, %v", got, err)
	}
	// Edit the first message: the new version is a root of its own.
	got, err = r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "u1"}, textMsg("u1e", repo.RoleUser, "good evening"))
	if err != nil || got[0].ParentID != nil || got[0].Seq != 8 {
		t.Fatalf("edit of the root = %+v, %v", got, err)
	}
	if got := brCurrent(t, r, s.ID); !slices.Equal(got, []string{"u1e"}) {
		t.Fatalf("current branch after editing the root = %v", got)
	}
	want := []string{"a2(u1,4,)", "a2e(u1,4,)", "a2f(u1,4,)", "u1e(u1e,1,u1e)*"}
	if got := brBranches(t, r, s.ID); !slices.Equal(got, want) {
		t.Fatalf("branches after editing the root = %v, want %v", got, want)
	}
	// The next plain append continues the edited root.
	if got, err := r.AppendMessages(ctx, s.ID, textMsg("a1e", repo.RoleAssistant, "evening")); err != nil || *got[0].ParentID != "u1e" {
		t.Fatalf("append after the root edit = %+v, %v", got, err)
	}
	// Every message is still stored, and each branch reads whole.
	all := mustLoad(t, r, s.ID)
	if !slices.Equal(msgIDs(all.Messages), []string{"u1", "a1", "u2", "a2", "u2e", "a2e", "a2f", "u1e", "a1e"}) {
		t.Fatalf("messages = %v", msgIDs(all.Messages))
	}
	for leaf, path := range map[string][]string{"a2": {"u1", "a1", "u2", "a2"}, "a2f": {"u1", "a1", "u2e", "a2f"}, "a1e": {"u1e", "a1e"}} {
		if got := brPath(t, r, s.ID, leaf); !slices.Equal(got, path) {
			t.Fatalf("LoadBranch(%s) = %v, want %v", leaf, got, path)
		}
	}
}

// testSessionsEditIdempotentAndStrict: an edit with caller-set ids retried
// after it landed returns the stored messages and writes nothing (strict or
// not); a strict edit at a stale version is ErrStaleVersion and writes
// nothing; an id stored under another parent is ErrDuplicate naming it.
func testSessionsEditIdempotentAndStrict(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	brConversation(t, r, s)
	v0 := mustLoad(t, r, s.ID).Version

	o := repo.AppendOptions{SiblingOf: "a2", ExpectedVersion: v0}
	batch := []repo.Message{textMsg("a2r", repo.RoleAssistant, "violets are blue")}
	if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "a2", ExpectedVersion: v0 - 1}, batch...); !errors.Is(err, repo.ErrStaleVersion) {
		t.Fatalf("stale strict edit = %v", err)
	}
	if now := mustLoad(t, r, s.ID); now.Version != v0 || now.MessageCount != 4 {
		t.Fatalf("a stale edit wrote: version %d count %d", now.Version, now.MessageCount)
	}
	first, err := r.AppendMessagesWith(ctx, s.ID, o, batch...)
	if err != nil || *first[0].ParentID != "u2" {
		t.Fatalf("strict edit = %+v, %v", first, err)
	}
	for _, retry := range []repo.AppendOptions{o, {SiblingOf: "a2"}} {
		again, err := r.AppendMessagesWith(ctx, s.ID, retry, batch...)
		if err != nil || len(again) != 1 || again[0].Seq != first[0].Seq || *again[0].ParentID != "u2" {
			t.Fatalf("retry (%+v) of a landed edit = %+v, %v", retry, again, err)
		}
	}
	if now := mustLoad(t, r, s.ID); now.Version != v0+1 || now.MessageCount != 5 {
		t.Fatalf("retries wrote: version %d (want %d) count %d", now.Version, v0+1, now.MessageCount)
	}
	// The same id and content as a sibling of another message: stored
	// under another parent.
	_, err = r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "u2"}, batch...)
	if !errors.Is(err, repo.ErrDuplicate) {
		t.Fatalf("edit reusing an id stored under another parent = %v", err)
	}
	checkCleanErr(t, "edit reusing an id", err, "a2r")
	// A root edit whose id is stored under a parent.
	_, err = r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "u1"}, batch...)
	if !errors.Is(err, repo.ErrDuplicate) {
		t.Fatalf("root edit reusing an id stored under a parent = %v", err)
	}
	checkCleanErr(t, "root edit reusing an id", err, "a2r")
	// A root edit retried.
	root := []repo.Message{textMsg("u1r", repo.RoleUser, "hey")}
	for i := 0; i < 2; i++ {
		got, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "u1"}, root...)
		if err != nil || got[0].ParentID != nil || got[0].Seq != 6 {
			t.Fatalf("root edit, attempt %d = %+v, %v", i+1, got, err)
		}
	}
	if now := mustLoad(t, r, s.ID); now.MessageCount != 6 || *now.CurrentLeafID != "u1r" {
		t.Fatalf("after the root edit and its retry: count %d leaf %s", now.MessageCount, *now.CurrentLeafID)
	}
}

// testSessionsBranchesCompactionCyclesDangling: a compact summary appended
// without a parent starts a new tree, so the history before it is a branch
// sharing nothing with the current one; a parent cycle a careless caller
// wrote, and a parent id naming no stored message, end the walks of
// Branches and LoadBranch; a session without messages has no branches.
func testSessionsBranchesCompactionCyclesDangling(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	empty := repo.NewSession()
	mustSave(t, r, empty)
	if bs, err := r.Branches(ctx, empty.ID); err != nil || bs == nil || len(bs) != 0 {
		t.Fatalf("branches of an empty session = %#v, %v", bs, err)
	}

	s := repo.NewSession()
	brConversation(t, r, s)
	c := textMsg("c1", repo.RoleUser, "summary of the conversation so far")
	c.IsCompactSummary = true
	if _, err := r.AppendMessages(ctx, s.ID, c, textMsg("u3", repo.RoleUser, "go on")); err != nil {
		t.Fatal(err)
	}
	if got, want := brBranches(t, r, s.ID), []string{"a2(u1,4,)", "u3(c1,2,u3)*"}; !slices.Equal(got, want) {
		t.Fatalf("branches after a compaction = %v, want %v", got, want)
	}
	// Rewinding to the history before the compaction is allowed.
	if _, err := r.Rewind(ctx, s.ID, "a2", repo.RewindOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, want := brBranches(t, r, s.ID), []string{"a2(u1,4,a2)*", "u3(c1,2,)"}; !slices.Equal(got, want) {
		t.Fatalf("branches after rewinding past the compaction = %v, want %v", got, want)
	}

	// A cycle: x -> y -> w -> x, and z under x; a dangling parent: d -> "ghost".
	cy := repo.NewSession()
	mustSave(t, r, cy)
	px, py, pw, pz, pd := "y", "w", "x", "x", "ghost"
	x, y, w, z, d := textMsg("x", repo.RoleUser, "x"), textMsg("y", repo.RoleAssistant, "y"), textMsg("w", repo.RoleUser, "w"),
		textMsg("z", repo.RoleUser, "z"), textMsg("d", repo.RoleUser, "d")
	x.ParentID, y.ParentID, w.ParentID, z.ParentID, d.ParentID = &px, &py, &pw, &pz, &pd
	if _, err := r.AppendMessages(ctx, cy.ID, x, y, w, z, d); err != nil {
		t.Fatal(err)
	}
	// Leaves z and d (x, y and w have children); the current leaf d. The
	// walk from z goes once around the cycle: z, x, y, w.
	if got, want := brBranches(t, r, cy.ID), []string{"z(w,4,)", "d(d,1,d)*"}; !slices.Equal(got, want) {
		t.Fatalf("branches with a cycle = %v, want %v", got, want)
	}
	if got := brPath(t, r, cy.ID, "z"); !slices.Equal(got, []string{"x", "y", "w", "z"}) {
		t.Fatalf("LoadBranch(z) over a cycle = %v", got)
	}
	if _, err := r.Rewind(ctx, cy.ID, "y", repo.RewindOptions{}); err != nil {
		t.Fatal(err)
	}
	// The current leaf y is on the cycle: its walk goes once around (y, w, x).
	if got, want := brBranches(t, r, cy.ID), []string{"y(x,3,y)*", "z(w,4,x)", "d(d,1,)"}; !slices.Equal(got, want) {
		t.Fatalf("branches with the leaf on a cycle = %v, want %v", got, want)
	}
	if got := brPath(t, r, cy.ID, "y"); !slices.Equal(got, []string{"x", "y", "w"}) {
		t.Fatalf("LoadBranch(y) = %v", got)
	}
}

// testSessionsLoadBranchOptions: LoadBranch reads any message's path
// (oldest first), equal to Load with CurrentBranch for the current leaf,
// narrowed by AfterSeq, BeforeSeq, Limit and LastN; options that leave
// nothing give an empty slice; invalid options are ErrInvalidInput.
func testSessionsLoadBranchOptions(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s := repo.NewSession()
	brConversation(t, r, s)
	if _, err := r.AppendMessagesWith(ctx, s.ID, repo.AppendOptions{SiblingOf: "u2"}, textMsg("u2e", repo.RoleUser, "e"),
		textMsg("a2e", repo.RoleAssistant, "e")); err != nil {
		t.Fatal(err)
	}
	cur := mustLoad(t, r, s.ID, repo.LoadOptions{CurrentBranch: true}).Messages
	ms, err := r.LoadBranch(ctx, s.ID, "a2e")
	if err != nil || len(ms) != len(cur) {
		t.Fatalf("LoadBranch(current leaf) = %v, %v", msgIDs(ms), err)
	}
	for i := range ms {
		if ms[i].ID != cur[i].ID || ms[i].Seq != cur[i].Seq || string(ms[i].Content) != string(cur[i].Content) ||
			!ms[i].CreatedAt.Equal(cur[i].CreatedAt) || ms[i].Role != cur[i].Role {
			t.Fatalf("LoadBranch message %d = %+v, Load's %+v", i, ms[i], cur[i])
		}
	}
	for _, c := range []struct {
		leaf string
		o    repo.LoadOptions
		want []string
	}{
		{"a2", repo.LoadOptions{}, []string{"u1", "a1", "u2", "a2"}},
		{"u2", repo.LoadOptions{}, []string{"u1", "a1", "u2"}},
		{"a2", repo.LoadOptions{LastN: 2}, []string{"u2", "a2"}},
		{"a2", repo.LoadOptions{Limit: 1}, []string{"u1"}},
		{"a2e", repo.LoadOptions{AfterSeq: 2}, []string{"u2e", "a2e"}},
		{"a2e", repo.LoadOptions{BeforeSeq: 6, LastN: 1}, []string{"u2e"}},
		{"a2", repo.LoadOptions{AfterSeq: 4}, []string{}},
		{"a2", repo.LoadOptions{CurrentBranch: true}, []string{"u1", "a1", "u2", "a2"}},
	} {
		if got := brPath(t, r, s.ID, c.leaf, c.o); !slices.Equal(got, c.want) {
			t.Errorf("LoadBranch(%s, %+v) = %v, want %v", c.leaf, c.o, got, c.want)
		}
	}
	for _, opts := range [][]repo.LoadOptions{{{Limit: 1, LastN: 1}}, {{AfterSeq: -1}}, {{}, {}}} {
		if _, err := r.LoadBranch(ctx, s.ID, "a2", opts...); !errors.Is(err, repo.ErrInvalidInput) {
			t.Errorf("LoadBranch with %+v = %v, want ErrInvalidInput", opts, err)
		}
	}
}

// testSessionsBranchErrors: every refusal of the new calls is typed, names
// the session or the id, and carries no driver text; refused calls write
// nothing.
func testSessionsBranchErrors(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	r := st.Sessions()
	ctx := context.Background()
	s, other := repo.NewSession(), repo.NewSession()
	brConversation(t, r, s)
	mustSave(t, r, other)
	if _, err := r.AppendMessages(ctx, other.ID, textMsg("elsewhere", repo.RoleUser, "x")); err != nil {
		t.Fatal(err)
	}
	before := mustLoad(t, r, s.ID)
	missing := uuid.New()
	long := strings.Repeat("m", repo.MaxIDLen+1)
	type call struct {
		name  string
		err   error
		want  error
		names []string
	}
	rewind := func(sid uuid.UUID, id string, o repo.RewindOptions) error {
		_, err := r.Rewind(ctx, sid, id, o)
		return err
	}
	edit := func(sid uuid.UUID, o repo.AppendOptions, msgs ...repo.Message) error {
		_, err := r.AppendMessagesWith(ctx, sid, o, msgs...)
		return err
	}
	branches := func(sid uuid.UUID) error { _, err := r.Branches(ctx, sid); return err }
	load := func(sid uuid.UUID, id string) error { _, err := r.LoadBranch(ctx, sid, id); return err }
	withParent := textMsg("e1", repo.RoleUser, "e")
	p := "u1"
	withParent.ParentID = &p
	badRole := textMsg("e2", "robot", "e")
	calls := []call{
		{"rewind to an unknown message", rewind(s.ID, "nope", repo.RewindOptions{}), repo.ErrNotFound, []string{"nope", s.ID.String()}},
		{"rewind to another session's message", rewind(s.ID, "elsewhere", repo.RewindOptions{}), repo.ErrNotFound, []string{"elsewhere"}},
		{"rewind of a missing session", rewind(missing, "u1", repo.RewindOptions{}), repo.ErrNotFound, []string{missing.String()}},
		{"rewind to an empty id", rewind(s.ID, "", repo.RewindOptions{}), repo.ErrInvalidInput, nil},
		{"rewind to an over-long id", rewind(s.ID, long, repo.RewindOptions{}), repo.ErrInvalidInput, []string{"255"}},
		{"rewind to an id with a NUL", rewind(s.ID, "a\x00b", repo.RewindOptions{}), repo.ErrInvalidInput, []string{"NUL"}},
		{"rewind with a negative version", rewind(s.ID, "u1", repo.RewindOptions{ExpectedVersion: -1}), repo.ErrInvalidInput, nil},
		{"edit of an unknown message", edit(s.ID, repo.AppendOptions{SiblingOf: "nope"}, textMsg("e0", repo.RoleUser, "e")), repo.ErrNotFound, []string{"nope"}},
		{"edit of another session's message", edit(s.ID, repo.AppendOptions{SiblingOf: "elsewhere"}, textMsg("e0", repo.RoleUser, "e")), repo.ErrNotFound, []string{"elsewhere"}},
		{"edit in a missing session", edit(missing, repo.AppendOptions{SiblingOf: "u1"}, textMsg("e0", repo.RoleUser, "e")), repo.ErrNotFound, []string{missing.String()}},
		{"edit with nothing", edit(s.ID, repo.AppendOptions{SiblingOf: "u1"}), repo.ErrInvalidInput, []string{"u1"}},
		{"edit setting ParentID", edit(s.ID, repo.AppendOptions{SiblingOf: "u2"}, withParent), repo.ErrInvalidInput, []string{"ParentID"}},
		{"edit reusing the edited id", edit(s.ID, repo.AppendOptions{SiblingOf: "u2"}, textMsg("u2", repo.RoleUser, "e")), repo.ErrInvalidInput, []string{"u2"}},
		{"edit with an invalid message", edit(missing, repo.AppendOptions{SiblingOf: "u2"}, badRole), repo.ErrInvalidInput, []string{"robot"}},
		{"edit of an over-long id", edit(s.ID, repo.AppendOptions{SiblingOf: long}, textMsg("e0", repo.RoleUser, "e")), repo.ErrInvalidInput, nil},
		{"branches of a missing session", branches(missing), repo.ErrNotFound, []string{missing.String()}},
		{"branch of an unknown message", load(s.ID, "nope"), repo.ErrNotFound, []string{"nope"}},
		{"branch of another session's message", load(s.ID, "elsewhere"), repo.ErrNotFound, []string{"elsewhere"}},
		{"branch of a missing session", load(missing, "u1"), repo.ErrNotFound, []string{missing.String()}},
		{"branch of an empty id", load(s.ID, ""), repo.ErrInvalidInput, nil},
	}
	for _, c := range calls {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.err, c.want)
			continue
		}
		var re *repo.Error
		if !errors.As(c.err, &re) || re.Op == "" {
			t.Errorf("%s: not a *repo.Error with its operation: %#v", c.name, c.err)
		}
		checkCleanErr(t, c.name, c.err, c.names...)
	}
	after := mustLoad(t, r, s.ID)
	if after.Version != before.Version || after.MessageCount != before.MessageCount || *after.CurrentLeafID != *before.CurrentLeafID {
		t.Fatalf("refused calls wrote: version %d→%d, count %d→%d, leaf %s→%s", before.Version, after.Version,
			before.MessageCount, after.MessageCount, *before.CurrentLeafID, *after.CurrentLeafID)
	}
}

// testSessionsBranchTenantIsolation: through another tenant's view the
// new calls find neither the session nor its messages (ErrNotFound, as for
// a missing session) and change nothing; the owner's view works.
func testSessionsBranchTenantIsolation(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	ctx := context.Background()
	acme, evil := st.ForTenant("acme").Sessions(), st.ForTenant("evil").Sessions()
	s := repo.NewSession()
	brConversation(t, acme, s)
	before := mustLoad(t, acme, s.ID)
	missing := uuid.New()
	for _, id := range []uuid.UUID{s.ID, missing} {
		_, err1 := evil.Rewind(ctx, id, "u1", repo.RewindOptions{})
		_, err2 := evil.AppendMessagesWith(ctx, id, repo.AppendOptions{SiblingOf: "u2"}, textMsg("x", repo.RoleUser, "x"))
		_, err3 := evil.Branches(ctx, id)
		_, err4 := evil.LoadBranch(ctx, id, "a2")
		for i, err := range []error{err1, err2, err3, err4} {
			if !errors.Is(err, repo.ErrNotFound) {
				t.Errorf("other tenant's call %d on %s = %v, want ErrNotFound", i+1, id, err)
			}
			checkCleanErr(t, "cross-tenant call", err, id.String())
		}
	}
	after := mustLoad(t, acme, s.ID)
	if after.Version != before.Version || after.MessageCount != 4 || *after.CurrentLeafID != "a2" {
		t.Fatalf("cross-tenant calls wrote: version %d→%d count %d leaf %s", before.Version, after.Version, after.MessageCount,
			*after.CurrentLeafID)
	}
	if _, err := acme.Rewind(ctx, s.ID, "a1", repo.RewindOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := brBranches(t, acme, s.ID); !slices.Equal(got, []string{"a1(u1,2,a1)*", "a2(u1,4,a1)"}) {
		t.Fatalf("owner's branches = %v", got)
	}
}

// testSessionsConcurrentRewindsAndAppends: strict rewinds racing at one
// version, from two Stores: exactly one moves the leaf, the others are
// ErrStaleVersion. Then appenders and rewinders race on one session: no
// message is lost or duplicated, every appended message hangs under a
// stored message, the leaf is a stored message, the version counts every
// append and at most every rewind, and the branches cover every message.
func testSessionsConcurrentRewindsAndAppends(t *testing.T, h *harness) {
	st, _ := newSessionsStore(t, h)
	st2 := h.Open(t)
	stores := []repo.Sessions{st.Sessions(), st2.Sessions()}
	r := stores[0]
	ctx := context.Background()
	s := repo.NewSession()
	brConversation(t, r, s)
	v0 := mustLoad(t, r, s.ID).Version

	targets := []string{"u1", "a1", "u2", "u1", "a1", "u2"}
	errs := make([]error, len(targets))
	var wg sync.WaitGroup
	for i, target := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = stores[i%2].Rewind(ctx, s.ID, target, repo.RewindOptions{ExpectedVersion: v0})
		}()
	}
	wg.Wait()
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, repo.ErrStaleVersion):
		default:
			t.Fatalf("racing rewind %d: %v", i, err)
		}
	}
	// A loser whose target equals the winner's succeeds too (the leaf is
	// already there); so at least one success, and exactly one write.
	if now := mustLoad(t, r, s.ID); won < 1 || now.Version != v0+1 {
		t.Fatalf("racing strict rewinds: %d succeeded, version %d (want %d)", won, now.Version, v0+1)
	}

	const appenders, rewinders, rounds = 3, 2, 15
	all := []string{"u1", "a1", "u2", "a2"}
	errc := make(chan error, appenders+rewinders)
	for a := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				m := textMsg(fmt.Sprintf("w%d-%d", a, i), repo.RoleUser, "x")
				if _, err := stores[a%2].AppendMessages(ctx, s.ID, m); err != nil {
					errc <- fmt.Errorf("append %s: %w", m.ID, err)
					return
				}
			}
		}()
	}
	for w := range rewinders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				if _, err := stores[w%2].Rewind(ctx, s.ID, all[(i+w)%len(all)], repo.RewindOptions{}); err != nil {
					errc <- fmt.Errorf("rewind: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	final := mustLoad(t, r, s.ID)
	n := 4 + appenders*rounds
	if len(final.Messages) != n || final.MessageCount != int64(n) || final.LastSeq != int64(n) {
		t.Fatalf("after the race: %d messages, count %d, last seq %d; want %d", len(final.Messages), final.MessageCount, final.LastSeq, n)
	}
	stored := map[string]bool{}
	for _, m := range final.Messages {
		if stored[m.ID] {
			t.Fatalf("message %s stored twice", m.ID)
		}
		stored[m.ID] = true
	}
	for _, m := range final.Messages[4:] {
		if m.ParentID == nil || !stored[*m.ParentID] {
			t.Fatalf("appended message %s hangs under %v", m.ID, m.ParentID)
		}
	}
	if !stored[*final.CurrentLeafID] {
		t.Fatalf("current leaf %s is not stored", *final.CurrentLeafID)
	}
	minV, maxV := v0+1+appenders*rounds, v0+1+appenders*rounds+rewinders*rounds
	if final.Version < int64(minV) || final.Version > int64(maxV) {
		t.Fatalf("version %d outside [%d, %d]", final.Version, minV, maxV)
	}
	bs, err := r.Branches(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	covered, current := map[string]bool{}, 0
	for _, b := range bs {
		if b.Current {
			current++
		}
		path := brPath(t, r, s.ID, b.LeafID)
		if int64(len(path)) != b.Length || path[0] != b.RootID || path[len(path)-1] != b.LeafID {
			t.Fatalf("branch %+v but LoadBranch = %v", b, path)
		}
		for _, id := range path {
			covered[id] = true
		}
	}
	if current != 1 || len(covered) != n {
		t.Fatalf("%d current branches, branches cover %d of %d messages", current, len(covered), n)
	}
}
