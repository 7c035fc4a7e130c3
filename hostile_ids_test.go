package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// hostileValue is one hostile string with a short name for messages.
type hostileValue struct {
	name string
	v    string
}

// hostileValues are tried everywhere an id, tenant, key or name is accepted.
func hostileValues() []hostileValue {
	return []hostileValue{
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

// hostilePlace stores v in one place and reads it back.
type hostilePlace struct {
	name string
	// try stores v and reads it back; it calls mark right before the
	// first write that involves v (setup writes come before it).
	try func(ctx context.Context, st *agentstore.Store, v string, mark func()) (got string, err error)
}

// tableCounts counts the rows of every table of both domains.
func tableCounts(t *testing.T, st *agentstore.Store) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, b := range []string{models.TableSessions, models.TableMessages, models.TableCompacts, models.TableSummaries, models.TableQueue,
		models.TableTodos, models.TablePlans, models.TableInstances, models.TableExecutions, models.TableHistory,
		models.TableOrchestratorQueue, models.TableWorkerQueue, models.TableInstanceLocks, models.TableActivitySessions} {
		out[b] = tableCount(t, st, b, "")
	}
	return out
}

// newSaved saves a new session (through ss) and returns it.
func newSaved(ctx context.Context, ss repo.Sessions) (*repo.Session, error) {
	s := repo.NewSession()
	return s, ss.Save(ctx, s)
}

func sessionPlaces() []hostilePlace {
	return []hostilePlace{
		{"tenant (ForTenant + Save + Load + List)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"session tenant field (ListParams.TenantID)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"message id (AppendMessages)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"message parent id, model, request id (Save)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"message content text", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
			s, err := newSaved(ctx, st.Sessions())
			if err != nil {
				return "", err
			}
			mark()
			content := []byte(`{"text":"` + v + `"}`) // raw: quotes and bad bytes must be refused as invalid JSON
			if _, err := st.Sessions().AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: content}); err != nil {
				return "", err
			}
			got, err := st.Sessions().Load(ctx, s.ID)
			if err != nil {
				return "", err
			}
			c := string(got.Messages[0].Content)
			if !strings.HasPrefix(c, `{"text":"`) || !strings.HasSuffix(c, `"}`) {
				return "", fmt.Errorf("content reshaped: %.60q", c)
			}
			return strings.TrimSuffix(strings.TrimPrefix(c, `{"text":"`), `"}`), nil
		}},
		{"subagent type and description", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"summary, error, current leaf id", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"todo content (SetTodos)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"plan name and content", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"summary snapshot (AddSummary)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"queue content and lease owner", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"instance id (start, fetch, ack, Read, GetInstanceInfo, ListInstances)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
			if err := p.AckOrchestrationItem(ctx, it.LockToken, completeTurn(it)); err != nil {
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
		{"orchestration name and version", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"activity name and input (worker queue)", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"activity tag, session id and worker owner id", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
		{"external event name and data", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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
			if err := p.AckOrchestrationItem(ctx, it.LockToken, completeTurn(it)); err != nil {
				return "", err
			}
			x := it.Messages[1].(*duroxide.ExternalRaised)
			if x.Data != v {
				return "", errors.New("data differs")
			}
			return x.Name, nil
		}},
		{"custom status", func(ctx context.Context, st *agentstore.Store, v string, mark func()) (string, error) {
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

// TestHostileIdentifiers stores every hostile value in every place that
// accepts an id, tenant, key or name, on both dialects. Each attempt must
// either read back exactly what was stored, or fail with ErrInvalidInput
// and leave every table exactly as it was (no partial write). Afterwards
// every table still exists (no injection).
func TestHostileIdentifiers(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		places := append(sessionPlaces(), providerPlaces()...)
		stored, rejected, wrong := 0, 0, 0
		for _, pl := range places {
			for _, hv := range hostileValues() {
				var before map[string]int64
				mark := func() { before = tableCounts(t, st) }
				mark()
				got, err := pl.try(ctx, st, hv.v, mark)
				switch {
				case err == nil && got == hv.v:
					stored++
				case err == nil:
					wrong++
					t.Errorf("%s / %s: stored %.40q but read back %.40q", pl.name, hv.name, hv.v, got)
				case errors.Is(err, agentstore.ErrInvalidInput):
					rejected++
					if after := tableCounts(t, st); !mapsEqual(before, after) {
						t.Errorf("%s / %s: rejected (%v) but rows changed: %v -> %v", pl.name, hv.name, err, before, after)
					}
				default:
					wrong++
					t.Errorf("%s / %s: neither stored exactly nor rejected with ErrInvalidInput: %v", pl.name, hv.name, err)
				}
				// Locks left by a failed attempt would starve the next one.
				_ = st.DB(ctx).Exec("DELETE FROM " + quotedTable(h, st, models.TableInstanceLocks)).Error
				_ = st.DB(ctx).Exec("DELETE FROM " + quotedTable(h, st, models.TableOrchestratorQueue)).Error
				_ = st.DB(ctx).Exec("DELETE FROM " + quotedTable(h, st, models.TableWorkerQueue)).Error
				_ = st.DB(ctx).Exec("DELETE FROM " + quotedTable(h, st, models.TableActivitySessions)).Error
			}
		}
		tableCounts(t, st) // every table still answers
		relLogf(t, "hostile identifiers: %d values x %d places = %d attempts: %d stored and read back exactly, %d rejected with ErrInvalidInput (no partial write), %d neither (changed or untyped), injections 0",
			len(hostileValues()), len(places), len(hostileValues())*len(places), stored, rejected, wrong)
	})
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHostileConfigNames: hostile table prefixes and schema names are
// refused by the options with ErrInvalidConfig before anything touches the
// database (they end up in DDL, so they must be plain identifiers).
func TestHostileConfigNames(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite:" + t.TempDir() + "/cfg.db"
	rejected := 0
	for _, hv := range hostileValues() {
		if _, err := agentstore.Open(ctx, dsn, agentstore.WithTablePrefix(hv.v)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("table prefix %s: %v, want ErrInvalidConfig", hv.name, err)
		} else {
			rejected++
		}
		if _, err := agentstore.Open(ctx, postgresDSN(), agentstore.WithSchema(hv.v)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("schema %s: %v, want ErrInvalidConfig", hv.name, err)
		} else {
			rejected++
		}
	}
	relLogf(t, "hostile config names: %d table prefixes and schema names tried, %d rejected with ErrInvalidConfig", 2*len(hostileValues()), rejected)
}
