package agentstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// hostileTests are the Hostile area's tests of this file.
func hostileTests() []test {
	return tests(
		test{"HostileIdentifiers", testHostileIdentifiers},
		test{"HostileCorruptRows", testHostileCorruptRows},
		test{"HostilePayload5MB", testHostilePayload5MB},
	)
}

// hostileLogf prints one figure line for RELIABILITY.md (the lines start
// with "RELIABILITY: ", as the root reliability tests' do).
func hostileLogf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf("RELIABILITY: %s: "+format, append([]any{t.Name()}, args...)...)
}

// hostilePlace stores v in one place and reads it back.
type hostilePlace struct {
	name string
	// try stores v and reads it back; it calls mark right before the
	// first write that involves v (setup writes come before it).
	try func(ctx context.Context, st Store, v string, mark func()) (got string, err error)
}

// newSaved saves a new session (through ss) and returns it.
func newSaved(ctx context.Context, ss repo.Sessions) (*repo.Session, error) {
	s := repo.NewSession()
	return s, ss.Save(ctx, s)
}

func sessionPlaces() []hostilePlace {
	return []hostilePlace{
		{"tenant (ForTenant + Save + Load + List)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			ss := st.ForTenant(v).Sessions()
			mark()
			s, err := newSaved(ctx, ss)
			if err != nil {
				return "", err
			}
			got, err := ss.Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			page, err := ss.List(ctx, repo.ListParams{})
			if err != nil {
				return "", err
			}
			if len(page.Sessions) != 1 || page.Sessions[0].ID != s.ID || page.Sessions[0].TenantID != v {
				return "", fmt.Errorf("tenant list = %+v, want only %s", page.Sessions, s.ID)
			}
			return got.TenantID, nil
		}},
		{"session tenant field (ListParams.TenantID)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s := repo.NewSession()
			s.TenantID = v
			if err := st.Sessions().Save(ctx, s); err != nil {
				return "", err
			}
			page, err := st.Sessions().List(ctx, repo.ListParams{TenantID: &v})
			if err != nil {
				return "", err
			}
			found := ""
			for _, r := range page.Sessions {
				if r.TenantID != v {
					return r.TenantID, fmt.Errorf("list by tenant returned tenant %.40q", r.TenantID)
				}
				if r.ID == s.ID {
					found = r.TenantID
				}
			}
			if found == "" {
				return "", fmt.Errorf("list by tenant lacks %s", s.ID)
			}
			return found, nil
		}},
		{"message id (AppendMessages)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s, err := newSaved(ctx, st.Sessions())
			if err != nil {
				return "", err
			}
			mark()
			if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: v, Role: repo.RoleUser, Content: []byte(`"x"`)}); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			return got.Messages[0].ID, nil
		}},
		{"message parent id, model, request id (Save)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s := repo.NewSession()
			s.AddMessage(repo.Message{ID: "m", ParentID: &v, Role: repo.RoleAssistant, Content: []byte(`"x"`), Model: &v, RequestID: &v})
			if err := st.Sessions().Save(ctx, s); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			m := got.Messages[0]
			if *m.Model != v || *m.RequestID != v {
				return "", fmt.Errorf("model %q request id %q differ", *m.Model, *m.RequestID)
			}
			return *m.ParentID, nil
		}},
		{"message content text", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s, err := newSaved(ctx, st.Sessions())
			if err != nil {
				return "", err
			}
			mark()
			content := []byte(`[{"text":"` + v + `"}]`) // raw: quotes and bad bytes must be refused as invalid JSON
			if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: content}); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			c := string(got.Messages[0].Content)
			if !strings.HasPrefix(c, `[{"text":"`) || !strings.HasSuffix(c, `"}]`) {
				return "", fmt.Errorf("content reshaped: %.60q", c)
			}
			return strings.TrimSuffix(strings.TrimPrefix(c, `[{"text":"`), `"}]`), nil
		}},
		{"subagent type and description", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			p, err := newSaved(ctx, st.Sessions())
			if err != nil {
				return "", err
			}
			mark()
			s := repo.NewSubagentSession(p.ID, v, v)
			if err := st.Sessions().Save(ctx, s); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			if got.Type.Description != v {
				return "", fmt.Errorf("description %.40q differs", got.Type.Description)
			}
			return got.Type.AgentType, nil
		}},
		{"summary, error, current leaf id", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s := repo.NewSession()
			s.Summary, s.Error, s.CurrentLeafID = &v, &v, &v
			if err := st.Sessions().Save(ctx, s); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			if *got.Summary != v || *got.Error != v {
				return "", fmt.Errorf("summary/error differ")
			}
			return *got.CurrentLeafID, nil
		}},
		{"todo content (SetTodos)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s, err := newSaved(ctx, st.Sessions())
			if err != nil {
				return "", err
			}
			mark()
			if _, err := st.Sessions().SetTodos(ctx, s.ID, []repo.TodoItem{{Content: v, ActiveForm: v, Status: repo.TodoPending}}); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			return got.Todos[0].Content, nil
		}},
		{"plan name and content", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s := repo.NewSession()
			s.EnterPlanMode(v, v, time.Now())
			if err := st.Sessions().Save(ctx, s); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			if got.CurrentPlan.Content != v {
				return "", fmt.Errorf("plan content differs")
			}
			return *got.CurrentPlan.Name, nil
		}},
		{"summary snapshot (AddSummary)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s, err := newSaved(ctx, st.Sessions())
			if err != nil {
				return "", err
			}
			mark()
			if _, err := st.Sessions().AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: v, LeafMessageID: &v}); err != nil {
				return "", err
			}
			got, err := st.Sessions().GetSummaries(ctx, s.ID)
			if err != nil {
				return "", err
			}
			if *got[0].LeafMessageID != v {
				return "", fmt.Errorf("leaf id differs")
			}
			return got[0].Summary, nil
		}},
		{"queue content and lease owner", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			s, err := newSaved(ctx, st.Sessions())
			if err != nil {
				return "", err
			}
			mark()
			q := st.SessionQueue()
			if _, err := q.Enqueue(ctx, s.ID, v, 0); err != nil {
				return "", err
			}
			pend, err := q.PendingQueue(ctx, s.ID)
			if err != nil {
				return "", err
			}
			if len(pend) != 1 || pend[0].Content != v {
				return "", fmt.Errorf("pending content differs")
			}
			mark()
			it, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Owner: v})
			if err != nil {
				return "", err
			}
			if it.Content != v {
				return "", fmt.Errorf("dequeued content differs")
			}
			mark()
			if err := q.Fail(ctx, repo.Lease{ItemID: it.ID, Token: *it.LeaseToken}, v); err != nil {
				return "", err
			}
			return *it.LeaseOwner, nil
		}},
	}
}

func providerPlaces() []hostilePlace {
	return []hostilePlace{
		{"instance id (start, fetch, ack, Read, GetInstanceInfo, ListInstances)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			p := st.Provider()
			mark()
			if err := p.EnqueueForOrchestrator(ctx, startItem(v, nil), 0); err != nil {
				return "", err
			}
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil {
				return "", err
			}
			if it == nil {
				return "", errors.New("start message not fetched")
			}
			if it.Instance != v {
				return it.Instance, fmt.Errorf("fetched instance %.40q", it.Instance)
			}
			if s := it.Messages[0].(*duroxide.StartOrchestration).Instance; s != v {
				return s, fmt.Errorf("message names instance %.40q", s)
			}
			mark()
			if err := p.AckOrchestrationItem(ctx, it.LockToken, testkit.CompleteTurn(it)); err != nil {
				return "", err
			}
			hist, err := p.Read(ctx, v)
			if err != nil {
				return "", err
			}
			if len(hist) != 2 || hist[0].InstanceID != v {
				return "", fmt.Errorf("history: %d events", len(hist))
			}
			ids, err := st.ProviderAdmin().ListInstances(ctx)
			if err != nil {
				return "", err
			}
			if !slices.Contains(ids, v) {
				return "", errors.New("ListInstances lacks the instance")
			}
			info, err := st.ProviderAdmin().GetInstanceInfo(ctx, v)
			if err != nil {
				return "", err
			}
			return info.InstanceID, nil
		}},
		{"orchestration name and version", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			p := st.Provider()
			inst := fmt.Sprintf("named-%d", time.Now().UnixNano())
			mark()
			if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: inst, Orchestration: v, Version: &v, Input: v, ExecutionID: 1}, 0); err != nil {
				return "", err
			}
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil {
				return "", fmt.Errorf("fetch: %v %w", it, err)
			}
			ack := duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{ev(inst, 1, 1, &duroxide.OrchestrationStartedEvent{Name: v, Version: v, Input: v})},
				Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusRunning), OrchestrationName: &v, OrchestrationVersion: &v}}
			mark()
			if err := p.AckOrchestrationItem(ctx, it.LockToken, ack); err != nil {
				return "", err
			}
			info, err := st.ProviderAdmin().GetInstanceInfo(ctx, inst)
			if err != nil {
				return "", err
			}
			if info.OrchestrationVersion != v {
				return "", fmt.Errorf("version %.40q differs", info.OrchestrationVersion)
			}
			hist, err := p.Read(ctx, inst)
			if err != nil {
				return "", err
			}
			if k := hist[0].Kind.(*duroxide.OrchestrationStartedEvent); k.Input != v || k.Name != v {
				return "", errors.New("started event differs")
			}
			return info.OrchestrationName, nil
		}},
		{"activity name and input (worker queue)", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			p := st.Provider()
			mark()
			if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "w", ExecutionID: 1, ID: 1, Name: v, Input: v}); err != nil {
				return "", err
			}
			l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
			if err != nil || l == nil {
				return "", fmt.Errorf("fetch: %v %w", l, err)
			}
			mark()
			if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
				return "", err
			}
			ae := l.Item.(*duroxide.ActivityExecute)
			if ae.Input != v {
				return "", errors.New("input differs")
			}
			return ae.Name, nil
		}},
		{"activity tag, session id and worker owner id", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			p := st.Provider()
			mark()
			if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "w", ExecutionID: 1, ID: 1, Name: "a", Input: "i", Tag: &v, SessionID: &v}); err != nil {
				return "", err
			}
			mark()
			l, err := p.FetchWorkItem(ctx, time.Minute, 0, &duroxide.SessionFetchConfig{OwnerID: v, LockTimeout: time.Minute},
				duroxide.TagFilter{Mode: duroxide.TagTags, Tags: []string{v}})
			if err != nil {
				return "", err
			}
			if l == nil {
				return "", errors.New("tagged session item not fetched with its own tag and owner")
			}
			mark()
			if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
				return "", err
			}
			ae := l.Item.(*duroxide.ActivityExecute)
			if ae.SessionID == nil || *ae.SessionID != v {
				return "", errors.New("session id differs")
			}
			return *ae.Tag, nil
		}},
		{"external event name and data", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			p := st.Provider()
			inst := fmt.Sprintf("ext-%d", time.Now().UnixNano())
			mark()
			if err := p.EnqueueForOrchestrator(ctx, startItem(inst, nil), 0); err != nil {
				return "", err
			}
			mark()
			if err := p.EnqueueForOrchestrator(ctx, &duroxide.ExternalRaised{Instance: inst, Name: v, Data: v}, 0); err != nil {
				return "", err
			}
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil {
				return "", fmt.Errorf("fetch: %v %w", it, err)
			}
			mark()
			if err := p.AckOrchestrationItem(ctx, it.LockToken, testkit.CompleteTurn(it)); err != nil {
				return "", err
			}
			x := it.Messages[1].(*duroxide.ExternalRaised)
			if x.Data != v {
				return "", errors.New("data differs")
			}
			return x.Name, nil
		}},
		{"custom status", func(ctx context.Context, st Store, v string, mark func()) (string, error) {
			p := st.Provider()
			inst := fmt.Sprintf("cs-%d", time.Now().UnixNano())
			mark()
			if err := p.EnqueueForOrchestrator(ctx, startItem(inst, nil), 0); err != nil {
				return "", err
			}
			it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
			if err != nil || it == nil {
				return "", fmt.Errorf("fetch: %v %w", it, err)
			}
			ack := duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{startedEv(inst, 1, 1, nil),
				ev(inst, 1, 2, &duroxide.CustomStatusUpdatedEvent{Status: &v})}, Metadata: runningMeta(nil)}
			mark()
			if err := p.AckOrchestrationItem(ctx, it.LockToken, ack); err != nil {
				return "", err
			}
			cs, err := p.GetCustomStatus(ctx, inst, 0)
			if err != nil {
				return "", err
			}
			if cs == nil || cs.Status == nil {
				return "", errors.New("no custom status")
			}
			return *cs.Status, nil
		}},
	}
}

// testHostileIdentifiers stores every hostile value in every place that
// accepts an id, tenant, key or name, on every dialect. Each attempt must
// either read back exactly what was stored, or fail with ErrInvalidInput
// and leave every table exactly as it was (no partial write). Afterwards
// every table still exists (no injection).
func testHostileIdentifiers(t *testing.T, h *harness) {
	ctx := context.Background()
	st := h.New(t)
	places := append(sessionPlaces(), providerPlaces()...)
	stored, rejected, wrong := 0, 0, 0
	for _, pl := range places {
		for _, hv := range testkit.HostileValues() {
			var before map[string]int64
			// white-box: row counts of every table prove "no partial
			// write"; no API counts the rows of all tables.
			mark := func() { before = h.tableCounts(t, st) }
			mark()
			got, err := pl.try(ctx, st, hv.V, mark)
			switch {
			case err == nil && got == hv.V:
				stored++
			case err == nil:
				wrong++
				t.Errorf("%s / %s: stored %.40q but read back %.40q", pl.name, hv.Name, hv.V, got)
			case errors.Is(err, agentstore.ErrInvalidInput):
				rejected++
				if after := h.tableCounts(t, st); !maps.Equal(before, after) {
					t.Errorf("%s / %s: rejected (%v) but rows changed: %v -> %v", pl.name, hv.Name, err, before, after)
				}
			default:
				wrong++
				t.Errorf("%s / %s: neither stored exactly nor rejected with ErrInvalidInput: %v", pl.name, hv.Name, err)
			}
			// Locks left by a failed attempt would starve the next one.
			// white-box: the API cannot drop queue rows and locks of
			// instances that do not exist (admin deletes need the instance).
			for _, table := range []string{models.TableInstanceLocks, models.TableOrchestratorQueue, models.TableWorkerQueue, models.TableActivitySessions} {
				_ = h.ops(t).Delete(ctx, st, table, nil)
			}
		}
	}
	h.tableCounts(t, st) // every table still answers
	hostileLogf(t, "hostile identifiers: %d values x %d places = %d attempts: %d stored and read back exactly, %d rejected with ErrInvalidInput (no partial write), %d neither (changed or untyped), injections 0",
		len(testkit.HostileValues()), len(places), len(testkit.HostileValues())*len(places), stored, rejected, wrong)
}

// wantCorrupt fails t unless err is a CorruptRowError (errors.Is
// ErrCorruptRow) naming table, row and column.
func wantCorrupt(t *testing.T, what string, err error, table, rowID, column string) {
	t.Helper()
	var ce *agentstore.CorruptRowError
	if !errors.Is(err, agentstore.ErrCorruptRow) || !errors.As(err, &ce) {
		t.Fatalf("%s: error %v, want a CorruptRowError", what, err)
	}
	if ce.Table != table || ce.RowID != rowID || ce.Column != column {
		t.Fatalf("%s: corrupt row %s/%s/%s, want %s/%s/%s", what, ce.Table, ce.RowID, ce.Column, table, rowID, column)
	}
}

// testHostileCorruptRows writes undecodable values (truncated JSON, unknown
// enums, unknown event and work-item variants) straight into stored rows of
// both domains. Every read of such a row must fail with a CorruptRowError
// naming the table, row and column — twice in a row (nothing is skipped) —
// and the row must still be there afterwards (nothing is deleted). After
// the row is repaired the data reads normally again.
func testHostileCorruptRows(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	st, ctx := e.st, e.ctx
	ss := st.Sessions()
	s := repo.NewSession()
	for i := range 3 {
		s.AddMessage(repo.Message{ID: fmt.Sprintf("m%d", i+1), Role: repo.RoleUser, Content: []byte(`[{"text":"hello"}]`)})
	}
	s.CompactHistory = []repo.CompactRecord{{Trigger: repo.TriggerManual, Summary: "sum"}}
	if err := ss.Save(ctx, s); err != nil {
		t.Fatal(err)
	}
	loaded, err := ss.Load(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	// white-box: set and must plant the corrupt values (and repair them);
	// the API refuses to write them.
	ops := h.ops(t)
	set := func(table string, where, values Row) error { return ops.Update(ctx, st, table, where, values) }
	must := func(table string, where, values Row) {
		t.Helper()
		h.update(t, st, table, where, values)
	}
	tried := 0
	twice := func(what string, read func() error, table, rowID, column string) {
		t.Helper()
		// white-box: no API counts the rows of every table ("nothing deleted").
		before := h.tableCounts(t, st)
		for range 2 {
			wantCorrupt(t, what, read(), table, rowID, column)
		}
		after := h.tableCounts(t, st)
		// a fetch that meets a corrupt message keeps the instance lock until it expires (documented)
		delete(before, models.TableInstanceLocks)
		delete(after, models.TableInstanceLocks)
		if !maps.Equal(before, after) {
			t.Fatalf("%s: rows changed by reading a corrupt row: %v -> %v", what, before, after)
		}
		tried++
	}
	load := func() error { _, err := ss.Load(ctx, s.ID); return err }
	sid := s.ID.String()
	msg := func(seq int) Row { return Row{"session_id": s.ID, "seq": seq} }

	// Truncated message content: a database without JSON validation
	// stores it, one with it (ValidatesJSON) refuses it.
	err = set(models.TableMessages, msg(2), Row{"content": `[{"text":"hel`})
	if !ops.ValidatesJSON() {
		if err != nil {
			t.Fatal(err)
		}
		twice("truncated content", load, models.TableMessages, sid+"/2", "content")
		must(models.TableMessages, msg(2), Row{"content": `[{"text":"hello"}]`})
	} else if err == nil {
		t.Fatal("a database that validates JSON accepted truncated JSON in a json column")
	}
	must(models.TableMessages, msg(3), Row{"role": "robot"})
	twice("unknown role", load, models.TableMessages, sid+"/3", "role")
	must(models.TableMessages, msg(3), Row{"role": "user"})
	must(models.TableSessions, Row{"id": s.ID}, Row{"state": "hibernating"})
	twice("unknown session state", load, models.TableSessions, sid, "state")
	must(models.TableSessions, Row{"id": s.ID}, Row{"state": "created"})
	cid := loaded.CompactHistory[0].ID
	must(models.TableCompacts, Row{"id": cid}, Row{"trigger": "cosmic-ray"})
	twice("unknown compact trigger", load, models.TableCompacts, cid.String(), "trigger")
	must(models.TableCompacts, Row{"id": cid}, Row{"trigger": "manual"})
	if got, err := ss.Load(ctx, s.ID); err != nil || len(got.Messages) != 3 {
		t.Fatalf("after repair: %v, %+v", err, got)
	}

	// Provider: history rows and queue rows.
	e.startInstance(t, "c1", nil)
	read := func() error { _, err := e.p.Read(ctx, "c1"); return err }
	readAdmin := func() error { _, err := e.a.ReadHistory(ctx, "c1"); return err }
	// white-box: the stored JSON of the event, to truncate it and restore it
	// byte for byte (the API returns decoded events only).
	event1 := Row{"instance_id": "c1", "event_id": 1}
	good := h.value(t, st, models.TableHistory, event1, "event_data")
	for _, bad := range []struct{ name, data string }{
		{"truncated event", good[:len(good)/2]},
		{"unknown event type", `{"event_id":1,"type":"FromTheFuture","instance_id":"c1","execution_id":1,"timestamp_ms":1,"duroxide_version":"9"}`},
		{"event of the wrong shape", `[1,2,3]`},
	} {
		must(models.TableHistory, event1, Row{"event_data": bad.data})
		twice(bad.name+" (Read)", read, models.TableHistory, "c1/1/1", "event_data")
		twice(bad.name+" (admin ReadHistory)", readAdmin, models.TableHistory, "c1/1/1", "event_data")
	}
	// A fetch of the instance reports the history error instead of dropping the history.
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "c1", Name: "x"})
	it := e.fetch(t)
	if it.HistoryError == "" || len(it.History) != 0 {
		t.Fatalf("fetch over corrupt history: HistoryError %q, %d events; want the error reported", it.HistoryError, len(it.History))
	}
	if err := e.p.AbandonOrchestrationItem(ctx, it.LockToken, 0, true); err != nil {
		t.Fatal(err)
	}
	must(models.TableHistory, event1, Row{"event_data": good})
	if hist, err := e.p.Read(ctx, "c1"); err != nil || len(hist) != 1 {
		t.Fatalf("after repair: %d events, %v", len(hist), err)
	}
	// drain the external event so the queue tests below see only their row
	it = e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{Metadata: runningMeta(nil)})

	// Worker item: truncated JSON and an unknown variant.
	if err := e.p.EnqueueForWorker(ctx, activity("c1", 1, 2)); err != nil {
		t.Fatal(err)
	}
	// white-box: the queue row's id, which the corruption targets and the
	// CorruptRowError must name; the API does not expose it.
	wid := h.value(t, st, models.TableWorkerQueue, nil, "id")
	wrow := Row{"id": mustInt(t, wid)}
	fetchWork := func() error {
		e.clock.Advance(testLock + time.Second) // the failed fetch keeps the lock: wait it out
		_, err := e.p.FetchWorkItem(ctx, testLock, 0, nil, duroxide.TagFilter{})
		return err
	}
	for _, bad := range []string{`{"ActivityExecute":{"instance":"c1","execution_id":1,"id":2,"na`, `{"NotAWorkItem":{}}`, `"just a string"`} {
		must(models.TableWorkerQueue, wrow, Row{"work_item": bad})
		twice(fmt.Sprintf("worker item %.20q", bad), fetchWork, models.TableWorkerQueue, wid, "work_item")
	}
	must(models.TableWorkerQueue, wrow, Row{"work_item": `{"ActivityExecute":{"instance":"c1","execution_id":1,"id":2,"name":"act","input":"in"}}`})
	e.clock.Advance(testLock + time.Second)
	if l, err := e.p.FetchWorkItem(ctx, testLock, 0, nil, duroxide.TagFilter{}); err != nil || l == nil || l.AttemptCount != 7 {
		t.Fatalf("after repair: %+v %v, want the item with attempt 7 (6 failed fetches counted)", l, err)
	}

	// Orchestrator message of an unknown variant.
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "c1", Name: "y"})
	// white-box: the queue row's id, as for the worker queue above.
	oid := h.value(t, st, models.TableOrchestratorQueue, nil, "id")
	must(models.TableOrchestratorQueue, Row{"id": mustInt(t, oid)}, Row{"work_item": `{"ExternalRaised":{"instance":"c1","na`})
	fetchOrch := func() error {
		e.clock.Advance(testLock + time.Second)
		_, err := e.p.FetchOrchestrationItem(ctx, testLock, 0, nil)
		return err
	}
	twice("truncated orchestrator message", fetchOrch, models.TableOrchestratorQueue, oid, "work_item")
	hostileLogf(t, "corrupt rows: %d corruptions (truncated JSON, unknown enums, unknown event/work-item variants) across sessions, messages, compacts, history, worker and orchestrator queues: each read twice -> CorruptRowError naming table/row/column, rows deleted 0, rows skipped 0", tried)
}

// bigText returns n bytes of varied printable ASCII and multi-byte UTF-8
// text (deterministic), safe inside a JSON string.
func bigText(n int) string {
	r := rand.New(rand.NewPCG(1, uint64(n)))
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_/()[]{}'"
	var b bytes.Buffer
	b.Grow(n)
	for b.Len() < n-4 {
		if r.IntN(64) == 0 {
			b.WriteString("é") // 2 bytes
			continue
		}
		b.WriteByte(alphabet[r.IntN(len(alphabet))])
	}
	for b.Len() < n {
		b.WriteByte('z')
	}
	return b.String()
}

// testHostilePayload5MB: a 5 MB message (Save and AppendMessages) and a
// 5 MB activity input (worker queue, and inside the history and worker item
// of an orchestration ack) round-trip byte for byte on every dialect.
func testHostilePayload5MB(t *testing.T, h *harness) {
	const size = 5 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st := h.New(t)
	text := bigText(size)
	content := []byte(`[{"type":"text","text":"` + text + `"}]`) // under DefaultMaxContentBytes (8 MiB)

	s := repo.NewSession()
	s.AddMessage(repo.Message{ID: "big-saved", Role: repo.RoleUser, Content: content})
	if err := st.Sessions().Save(ctx, s); err != nil {
		t.Fatalf("save 5 MB message: %v", err)
	}
	if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{ID: "big-appended", Role: repo.RoleAssistant, Content: content}); err != nil {
		t.Fatalf("append 5 MB message: %v", err)
	}
	got, err := st.Sessions().Load(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 2 {
		t.Fatalf("%d messages, want 2", len(got.Messages))
	}
	for _, m := range got.Messages {
		if !bytes.Equal(m.Content, content) {
			t.Fatalf("message %s: %d bytes read back, want the %d bytes written", m.ID, len(m.Content), len(content))
		}
	}

	p := st.Provider()
	if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "big", ExecutionID: 1, ID: 1, Name: "act", Input: text}); err != nil {
		t.Fatalf("enqueue 5 MB activity: %v", err)
	}
	l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
	if err != nil || l == nil {
		t.Fatalf("fetch 5 MB activity: %v %v", l, err)
	}
	if in := l.Item.(*duroxide.ActivityExecute).Input; in != text {
		t.Fatalf("activity input: %d bytes read back, want %d", len(in), len(text))
	}
	if err := p.AckWorkItem(ctx, l.LockToken, nil); err != nil {
		t.Fatal(err)
	}

	// through an orchestration turn: the scheduled event and the worker item
	if err := p.EnqueueForOrchestrator(ctx, startItem("big", nil), 0); err != nil {
		t.Fatal(err)
	}
	it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
	if err != nil || it == nil {
		t.Fatalf("fetch: %v %v", it, err)
	}
	ack := duroxide.OrchestrationAck{ExecutionID: 1,
		HistoryDelta: []duroxide.Event{startedEv("big", 1, 1, nil), ev("big", 1, 2, &duroxide.ActivityScheduledEvent{Name: "act", Input: text})},
		WorkerItems:  []duroxide.WorkItem{&duroxide.ActivityExecute{Instance: "big", ExecutionID: 1, ID: 2, Name: "act", Input: text}},
		Metadata:     runningMeta(nil)}
	if err := p.AckOrchestrationItem(ctx, it.LockToken, ack); err != nil {
		t.Fatalf("ack with 5 MB input: %v", err)
	}
	hist, err := p.Read(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if in := hist[1].Kind.(*duroxide.ActivityScheduledEvent).Input; in != text {
		t.Fatalf("scheduled event input: %d bytes, want %d", len(in), len(text))
	}
	l, err = p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
	if err != nil || l == nil {
		t.Fatalf("fetch: %v %v", l, err)
	}
	if in := l.Item.(*duroxide.ActivityExecute).Input; in != text {
		t.Fatalf("scheduled activity input: %d bytes, want %d", len(in), len(text))
	}
	hostileLogf(t, "payloads: 5 MB message (Save + AppendMessages, %d bytes JSON) and 5 MB activity input (worker queue, history event, ack worker item) round-tripped byte for byte", len(content))
}
