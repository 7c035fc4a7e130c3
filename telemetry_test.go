package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/agentstoretest"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// telEnv is a Store with in-memory trace and metric exporters.
type telEnv struct {
	st     *agentstore.Store
	spans  *tracetest.InMemoryExporter
	tp     *sdktrace.TracerProvider
	reader *sdkmetric.ManualReader
	system string
}

func newTelEnv(t *testing.T, h *harness, opts ...agentstore.Option) *telEnv {
	t.Helper()
	e := &telEnv{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader()}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = e.tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	opts = append(opts, agentstore.WithTracerProvider(e.tp), agentstore.WithMeterProvider(mp))
	e.st = h.New(t, opts...)
	e.system = map[agentstore.Dialect]string{agentstore.Postgres: "postgresql", agentstore.SQLite: "sqlite", agentstore.MariaDB: "mariadb"}[h.Dialect]
	return e
}

// span returns the one ended span named name (fails on none or several).
func (e *telEnv) span(t *testing.T, name string) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	for _, s := range e.spans.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d spans named %s, want 1 (spans: %v)", len(found), name, e.names())
	}
	return found[0]
}

func (e *telEnv) names() []string {
	var out []string
	for _, s := range e.spans.GetSpans() {
		out = append(out, s.Name)
	}
	return out
}

func attrMap(kvs []attribute.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// wantAttrs checks that span s has exactly the given agentstore/db
// attributes among its keys (want values; "" means absent).
func wantAttrs(t *testing.T, s tracetest.SpanStub, want map[string]string) {
	t.Helper()
	got := attrMap(s.Attributes)
	for k, v := range want {
		if v == "" {
			if g, ok := got[k]; ok {
				t.Errorf("%s: attribute %s = %q, want none", s.Name, k, g)
			}
			continue
		}
		if got[k] != v {
			t.Errorf("%s: attribute %s = %q, want %q (all: %v)", s.Name, k, got[k], v, got)
		}
	}
}

func (e *telEnv) collect(t *testing.T) metricdata.ResourceMetrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect: %v", err)
	}
	return rm
}

func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		got, ok := set.Value(attribute.Key(k))
		if !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// intValue sums the int64 points (counter, up-down counter or gauge) of
// metric name whose attributes include want; ok is false when none.
func intValue(rm metricdata.ResourceMetrics, name string, want map[string]string) (v int64, ok bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes, want) {
						v, ok = v+p.Value, true
					}
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes, want) {
						v, ok = v+p.Value, true
					}
				}
			}
		}
	}
	return v, ok
}

func floatGauge(rm metricdata.ResourceMetrics, name string, want map[string]string) (float64, bool) {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, isGauge := m.Data.(metricdata.Gauge[float64]); isGauge && m.Name == name {
				for _, p := range d.DataPoints {
					if matches(p.Attributes, want) {
						return p.Value, true
					}
				}
			}
		}
	}
	return 0, false
}

func histCount(rm metricdata.ResourceMetrics, name string, want map[string]string) uint64 {
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == name {
				for _, p := range d.DataPoints {
					if matches(p.Attributes, want) {
						n += p.Count
					}
				}
			}
		}
	}
	return n
}

const secret = "SECRET-PAYLOAD-7f3a"

// TestTelemetrySpans: one span per repository call, child of the caller's
// span, with the db.* and agentstore.* attributes, no payload, error
// status with the sentinel class for a failing call, and neither status
// nor error for "nothing found".
func TestTelemetrySpans(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newTelEnv(t, h)
		ctx, parent := e.tp.Tracer("caller").Start(context.Background(), "caller")

		s := repo.NewSession()
		if err := e.st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.Sessions().AppendMessages(ctx, s.ID, testkit.TextMsg("m1", repo.RoleUser, secret)); err != nil {
			t.Fatal(err)
		}
		missing := uuid.New()
		if _, err := e.st.Sessions().Load(ctx, missing); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("load missing: %v", err)
		}
		if _, err := e.st.Sessions().AppendMessagesWith(ctx, s.ID, repo.AppendOptions{ExpectedVersion: 999},
			testkit.TextMsg("m2", repo.RoleUser, secret)); !errors.Is(err, agentstore.ErrStaleVersion) {
			t.Fatalf("stale append: %v", err)
		}
		q := e.st.SessionQueue()
		if _, err := q.Enqueue(ctx, s.ID, secret, 1); err != nil {
			t.Fatal(err)
		}
		p := e.st.Provider()
		if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: "inst-1", Orchestration: "Orch",
			Input: secret, ExecutionID: 1}, 0); err != nil {
			t.Fatal(err)
		}
		it, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || it == nil {
			t.Fatalf("fetch: %v %v", it, err)
		}
		if l, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{}); err != nil || l != nil {
			t.Fatalf("empty fetch: %v %v", l, err)
		}
		badToken := "lock_" + secret + ".1"
		if err := p.AckWorkItem(ctx, badToken, nil); !errors.Is(err, agentstore.ErrLockLost) {
			t.Fatalf("ack with a bad token: %v", err)
		}
		if _, err := p.Admin().ListInstances(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.st.ProviderAdmin().GetInstanceInfo(ctx, "nope"); !errors.Is(err, agentstore.ErrNotFound) {
			t.Fatalf("info of unknown: %v", err)
		}
		parent.End()

		sys := e.system
		pc := parent.SpanContext()
		for _, sp := range e.spans.GetSpans() {
			if sp.Name == "caller" {
				continue
			}
			if !strings.HasPrefix(sp.Name, "agentstore.") {
				t.Errorf("span %q", sp.Name)
			}
			if sp.SpanKind != trace.SpanKindClient {
				t.Errorf("%s: kind %v, want client", sp.Name, sp.SpanKind)
			}
			if sp.SpanContext.TraceID() != pc.TraceID() {
				t.Errorf("%s: trace %s, want the caller's %s", sp.Name, sp.SpanContext.TraceID(), pc.TraceID())
			}
			for _, kv := range sp.Attributes {
				if v := kv.Value.Emit(); strings.Contains(v, "SECRET") {
					t.Errorf("%s: attribute %s carries the payload or token: %q", sp.Name, kv.Key, v)
				}
			}
			if strings.Contains(sp.Status.Description, "SECRET") {
				t.Errorf("%s: status carries the payload: %q", sp.Name, sp.Status.Description)
			}
			if len(sp.Events) > 0 {
				for _, ev := range sp.Events {
					if ev.Name == "exception" {
						t.Errorf("%s: exception event (error text) recorded", sp.Name)
					}
				}
			}
		}

		save := e.span(t, "agentstore.Sessions.Save")
		if save.Parent.SpanID() != pc.SpanID() {
			t.Errorf("Save's parent %s, want the caller's span %s", save.Parent.SpanID(), pc.SpanID())
		}
		wantAttrs(t, save, map[string]string{"db.system.name": sys, "db.operation.name": "save_session",
			"db.collection.name": e.st.Table("sessions"), "agentstore.session_id": s.ID.String(), "agentstore.outcome": "ok"})
		if save.Status.Code != codes.Unset {
			t.Errorf("Save status %v", save.Status)
		}
		app := e.span(t, "agentstore.Sessions.AppendMessages")
		wantAttrs(t, app, map[string]string{"db.system.name": sys, "db.operation.name": "append_messages",
			"db.collection.name": e.st.Table("messages"), "agentstore.session_id": s.ID.String(), "error.type": ""})

		load := e.span(t, "agentstore.Sessions.Load")
		wantAttrs(t, load, map[string]string{"agentstore.session_id": missing.String(), "agentstore.outcome": "not_found", "error.type": ""})
		if load.Status.Code != codes.Unset {
			t.Errorf("not-found Load status %+v, want unset", load.Status)
		}

		stale := e.span(t, "agentstore.Sessions.AppendMessagesWith")
		if stale.Status.Code != codes.Error || stale.Status.Description != "stale_version" {
			t.Errorf("stale append status %+v, want Error stale_version", stale.Status)
		}
		wantAttrs(t, stale, map[string]string{"error.type": "stale_version", "agentstore.outcome": "error"})

		enq := e.span(t, "agentstore.SessionQueue.Enqueue")
		wantAttrs(t, enq, map[string]string{"db.operation.name": "enqueue", "db.collection.name": e.st.Table("queue"),
			"agentstore.session_id": s.ID.String()})

		eo := e.span(t, "agentstore.Provider.EnqueueForOrchestrator")
		wantAttrs(t, eo, map[string]string{"db.system.name": sys, "agentstore.instance_id": "inst-1",
			"db.collection.name": e.st.Table("orchestrator_queue"), "agentstore.session_id": ""})
		fo := e.span(t, "agentstore.Provider.FetchOrchestrationItem")
		wantAttrs(t, fo, map[string]string{"agentstore.instance_id": "inst-1", "agentstore.outcome": "ok",
			"db.operation.name": "fetch_orchestration_item"})
		fw := e.span(t, "agentstore.Provider.FetchWorkItem")
		wantAttrs(t, fw, map[string]string{"agentstore.outcome": "empty", "error.type": ""})
		if fw.Status.Code != codes.Unset {
			t.Errorf("empty fetch status %+v, want unset", fw.Status)
		}
		ack := e.span(t, "agentstore.Provider.AckWorkItem")
		if ack.Status.Code != codes.Error || ack.Status.Description != "lock_lost" {
			t.Errorf("bad-token ack status %+v, want Error lock_lost", ack.Status)
		}
		wantAttrs(t, ack, map[string]string{"error.type": "lock_lost", "db.operation.name": "ack_work_item"})
		e.span(t, "agentstore.ProviderAdmin.ListInstances")
		info := e.span(t, "agentstore.ProviderAdmin.GetInstanceInfo")
		wantAttrs(t, info, map[string]string{"agentstore.outcome": "not_found", "agentstore.instance_id": "nope", "error.type": ""})
		if info.Status.Code != codes.Unset {
			t.Errorf("not-found status %+v, want unset", info.Status)
		}
	})
}

// TestTelemetryLockChildren: calls on WithSessionLock's tx are traced as
// children of the lock's span.
func TestTelemetryLockChildren(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		e := newTelEnv(t, h)
		ctx := context.Background()
		s := repo.NewSession()
		if err := e.st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		if err := e.st.Sessions().WithSessionLock(ctx, s.ID, func(ctx context.Context, tx repo.Sessions) error {
			_, err := tx.Load(ctx, s.ID)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		lock := e.span(t, "agentstore.Sessions.WithSessionLock")
		wantAttrs(t, lock, map[string]string{"agentstore.session_id": s.ID.String(), "agentstore.outcome": "ok"})
		load := e.span(t, "agentstore.Sessions.Load")
		if load.Parent.SpanID() != lock.SpanContext.SpanID() {
			t.Errorf("Load in the lock: parent %s, want the lock's span %s", load.Parent.SpanID(), lock.SpanContext.SpanID())
		}
	})
}

// TestTelemetryQueueMetrics: call counts, the depth and age gauges of the
// three queues, redeliveries after an expired lease and lock-lost acks.
func TestTelemetryQueueMetrics(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		clock := newTestClock()
		e := newTelEnv(t, h, agentstore.WithClock(clock.Now))
		ctx := context.Background()
		sys := e.system
		s := repo.NewSession()
		if err := e.st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		q, p := e.st.SessionQueue(), e.st.Provider()
		for i := range 3 {
			if _, err := q.Enqueue(ctx, s.ID, fmt.Sprint("item ", i), 0); err != nil {
				t.Fatal(err)
			}
			if err := p.EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: fmt.Sprint("w", i), ExecutionID: 1, ID: 1, Name: "act", Input: "x"}); err != nil {
				t.Fatal(err)
			}
			if err := p.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: fmt.Sprint("o", i), Orchestration: "Orch", Input: "{}", ExecutionID: 1}, 0); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(5 * time.Second)
		gauges := func(rm metricdata.ResourceMetrics, want map[string]int64, wantAge map[string]float64) {
			t.Helper()
			for queue, n := range want {
				table := map[string]string{"session": "queue", "worker": "worker_queue", "orchestrator": "orchestrator_queue"}[queue]
				got, ok := intValue(rm, agentstore.MetricQueueDepth, map[string]string{"agentstore.queue": queue, "db.system.name": sys,
					"db.collection.name": e.st.Table(table)})
				if !ok || got != n {
					t.Errorf("depth of %s queue = %d (reported %v), want %d", queue, got, ok, n)
				}
				age, ok := floatGauge(rm, agentstore.MetricQueueAge, map[string]string{"agentstore.queue": queue})
				if !ok || age != wantAge[queue] {
					t.Errorf("oldest age of %s queue = %v (reported %v), want %v", queue, age, ok, wantAge[queue])
				}
			}
		}
		rm := e.collect(t)
		gauges(rm, map[string]int64{"session": 3, "worker": 3, "orchestrator": 3}, map[string]float64{"session": 5, "worker": 5, "orchestrator": 5})
		if n := histCount(rm, agentstore.MetricCallDuration, map[string]string{"db.operation.name": "enqueue", "agentstore.outcome": "ok", "db.system.name": sys}); n != 3 {
			t.Errorf("enqueue calls recorded %d, want 3", n)
		}

		// one of each fetched: depth 2 each
		first, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Second})
		if err != nil || first == nil {
			t.Fatalf("dequeue: %v %v", first, err)
		}
		wl, err := p.FetchWorkItem(ctx, time.Second, 0, nil, duroxide.TagFilter{})
		if err != nil || wl == nil {
			t.Fatalf("fetch work: %v %v", wl, err)
		}
		oi, err := p.FetchOrchestrationItem(ctx, time.Second, 0, nil)
		if err != nil || oi == nil {
			t.Fatalf("fetch orch: %v %v", oi, err)
		}
		rm = e.collect(t)
		gauges(rm, map[string]int64{"session": 2, "worker": 2, "orchestrator": 2}, map[string]float64{"session": 5, "worker": 5, "orchestrator": 5})
		for _, queue := range []string{"session", "worker", "orchestrator"} {
			if n, _ := intValue(rm, agentstore.MetricRedelivered, map[string]string{"agentstore.queue": queue}); n != 0 {
				t.Errorf("%s redeliveries %d before any lease expired", queue, n)
			}
		}

		// leases and locks expire; the same items are handed out again
		clock.Advance(2 * time.Second)
		again, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: time.Minute})
		if err != nil || again == nil || again.ID != first.ID {
			t.Fatalf("dequeue after the lease expired: %v %v, want item %s again", again, err, first.ID)
		}
		wl2, err := p.FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err != nil || wl2 == nil || wl2.AttemptCount != 2 {
			t.Fatalf("fetch work after the lock expired: %+v %v", wl2, err)
		}
		oi2, err := p.FetchOrchestrationItem(ctx, time.Minute, 0, nil)
		if err != nil || oi2 == nil || oi2.Instance != oi.Instance {
			t.Fatalf("fetch orch after the lock expired: %+v %v", oi2, err)
		}
		// the first holders' acks are refused
		if err := q.Complete(ctx, repo.Lease{ItemID: first.ID, Token: *first.LeaseToken}); !errors.Is(err, agentstore.ErrLockLost) {
			t.Fatalf("complete with the expired lease: %v", err)
		}
		if err := p.AckWorkItem(ctx, wl.LockToken, nil); !errors.Is(err, agentstore.ErrLockLost) {
			t.Fatalf("ack with the expired lock: %v", err)
		}
		if err := p.AbandonOrchestrationItem(ctx, oi.LockToken, 0, false); !errors.Is(err, agentstore.ErrLockLost) {
			t.Fatalf("abandon with the expired lock: %v", err)
		}
		rm = e.collect(t)
		for queue, op := range map[string]string{"session": "complete", "worker": "ack_work_item", "orchestrator": "abandon_orchestration_item"} {
			if n, _ := intValue(rm, agentstore.MetricRedelivered, map[string]string{"agentstore.queue": queue, "db.system.name": sys}); n != 1 {
				t.Errorf("%s redeliveries %d, want 1", queue, n)
			}
			if n, _ := intValue(rm, agentstore.MetricLockLost, map[string]string{"agentstore.queue": queue, "db.operation.name": op}); n != 1 {
				t.Errorf("%s lock lost (%s) %d, want 1", queue, op, n)
			}
		}
		if n := histCount(rm, agentstore.MetricCallDuration, map[string]string{"db.operation.name": "ack_work_item", "agentstore.outcome": "error", "error.type": "lock_lost"}); n != 1 {
			t.Errorf("failed acks recorded %d, want 1", n)
		}
		if n := histCount(rm, agentstore.MetricCallDuration, map[string]string{"db.operation.name": "dequeue"}); n != 2 {
			t.Errorf("dequeues recorded %d, want 2", n)
		}
	})
}

// testTelemetryWakeup (TestTimingSensitive/TelemetryWakeup): a fetch
// waiting on one Store is woken by another Store's enqueue (LISTEN/NOTIFY,
// the data_version watcher), and the wake-up is counted (MariaDB, which has
// no cross-Store wake-up: the Store's own enqueue wakes it).
func testTelemetryWakeup(t *testing.T) {
	forEachDialect(t, func(t *testing.T, h *harness) {
		// a poll interval of a minute: only a wake-up ends the wait early
		e := newTelEnv(t, h, agentstore.WithPollInterval(time.Minute))
		other := h.Open(t)
		if !e.st.Capabilities().Has(agentstore.CapWakeup) {
			// MariaDB: no cross-Store wake-up; the Store's own enqueue
			// wakes its waiting fetch.
			other = e.st
		}
		ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		type res struct {
			l   *duroxide.WorkItemLease
			err error
		}
		done := make(chan res, 1)
		go func() {
			l, err := e.st.Provider().FetchWorkItem(ctx, time.Minute, 40*time.Second, nil, duroxide.TagFilter{})
			done <- res{l, err}
		}()
		waiting := func() int64 {
			n, _ := intValue(e.collect(t), agentstore.MetricWaiting, map[string]string{"agentstore.queue": "worker"})
			return n
		}
		for i := 0; waiting() != 1; i++ {
			if i > 2000 {
				t.Fatal("the fetch never waited")
			}
			time.Sleep(5 * time.Millisecond)
		}
		// The wake-up mechanism wakes waiting fetches once when it comes
		// up (work may have arrived before); those count too.
		before, _ := intValue(e.collect(t), agentstore.MetricWakeups, map[string]string{"agentstore.queue": "worker"})
		if err := other.Provider().EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "wk", ExecutionID: 1, ID: 1, Name: "act", Input: "x"}); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.l == nil {
			t.Fatalf("woken fetch: %v %v", r.l, r.err)
		}
		rm := e.collect(t)
		// Only a wake-up ends the wait before the minute's re-check.
		if n, _ := intValue(rm, agentstore.MetricWakeups, map[string]string{"agentstore.queue": "worker", "db.system.name": e.system}); n < before+1 {
			t.Errorf("wake-ups %d, want at least %d", n, before+1)
		}
		if n, _ := intValue(rm, agentstore.MetricWaiting, map[string]string{"agentstore.queue": "worker"}); n != 0 {
			t.Errorf("waiting fetches %d after the fetch returned, want 0", n)
		}
		fw := e.span(t, "agentstore.Provider.FetchWorkItem")
		woke := false
		for _, ev := range fw.Events {
			woke = woke || ev.Name == "agentstore.wakeup"
		}
		if !woke {
			t.Errorf("fetch span has no agentstore.wakeup event: %v", fw.Events)
		}
	})
}

// TestTelemetryRetry provokes a retryable failure (SQLITE_BUSY: another
// connection holds the write lock and the handle has no busy timeout) and
// sees the fetch's internal retry counted, and logged as an Info "retry"
// event on the WithSlog logger.
func TestTelemetryRetry(t *testing.T) {
	path := filepath.Join(t.TempDir(), "retry.db")
	migrated := (&harness{Dialect: agentstore.SQLite, DSN: "sqlite:" + path}).New(t)
	ctx := context.Background()
	if err := migrated.Provider().EnqueueForWorker(ctx, &duroxide.ActivityExecute{Instance: "r", ExecutionID: 1, ID: 1, Name: "act", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	gdb := openGormSQLite(t, "file:"+path+"?_busy_timeout=0&_journal_mode=WAL&_foreign_keys=on")
	e := &telEnv{spans: tracetest.NewInMemoryExporter(), reader: sdkmetric.NewManualReader(), system: "sqlite"}
	e.tp = sdktrace.NewTracerProvider(sdktrace.WithSyncer(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	rec := &slogRecorder{}
	st, err := agentstore.New(gdb, agentstore.WithTracerProvider(e.tp), agentstore.WithMeterProvider(mp), agentstore.WithSlog(slog.New(rec)))
	if err != nil {
		t.Fatal(err)
	}
	e.st = st
	defer st.Close()

	conn := sqliteConn(t, "file:"+path+"?_busy_timeout=0")
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	type res struct {
		l   *duroxide.WorkItemLease
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, err := st.Provider().FetchWorkItem(ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		done <- res{l, err}
	}()
	retries := func() int64 {
		n, _ := intValue(e.collect(t), agentstore.MetricRetries, map[string]string{"db.operation.name": "fetch_work_item", "db.system.name": "sqlite"})
		return n
	}
	for i := 0; retries() < 1; i++ {
		if i > 5000 {
			t.Fatal("no retry counted while the write lock was held")
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := conn.ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil && !errors.Is(r.err, agentstore.ErrRetryable) {
		t.Fatalf("fetch: %v", r.err)
	}
	fw := e.span(t, "agentstore.Provider.FetchWorkItem")
	retried := false
	for _, ev := range fw.Events {
		retried = retried || ev.Name == "agentstore.retry"
	}
	if !rec.has("INFO retry") {
		t.Errorf("no slog retry event: %v", rec)
	}
	if !retried {
		t.Errorf("fetch span has no agentstore.retry event: %v", fw.Events)
	}
}

// TestTelemetryOffAddsNothing: without the options the Store hands out
// its repositories unwrapped (the code path of a Store without
// telemetry is the one it always was); with them, wrapped. A noop
// provider still wraps (see BenchmarkTelemetry for the cost).
func TestTelemetryOffAddsNothing(t *testing.T) {
	h := newHarness(t, agentstore.SQLite)
	off := h.New(t)
	for _, c := range []struct {
		got, want string
	}{
		{fmt.Sprintf("%T", off.Sessions()), "engine.sessionsAPI"},
		{fmt.Sprintf("%T", off.SessionQueue()), "engine.sessionQueueAPI"},
		{fmt.Sprintf("%T", off.ForTenant("t").Sessions()), "engine.sessionsAPI"},
		{fmt.Sprintf("%T", off.Provider()), "*engine.gormProvider"},
		{fmt.Sprintf("%T", off.ProviderAdmin()), "*engine.gormProvider"},
	} {
		if c.got != c.want {
			t.Errorf("without telemetry: %s, want %s", c.got, c.want)
		}
	}
	on := h.Open(t, agentstore.WithTracerProvider(tracenoop.NewTracerProvider()))
	if got := fmt.Sprintf("%T", on.Sessions()); got != "engine.tracedSessions" {
		t.Errorf("with a tracer provider: %s", got)
	}
	if on.Provider() != on.Provider() || on.Provider().Admin() != on.ProviderAdmin() {
		t.Error("the traced provider is not one value per Store")
	}
	if _, err := agentstore.Open(context.Background(), h.DSN, agentstore.WithTracerProvider(nil)); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Errorf("nil tracer provider: %v", err)
	}
	if _, err := agentstore.Open(context.Background(), h.DSN, agentstore.WithMeterProvider(nil)); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Errorf("nil meter provider: %v", err)
	}
}

// BenchmarkTelemetry compares a session Load (SQLite) without telemetry,
// with noop providers and with the SDK (in-memory exporter, manual
// reader): ns/op and allocs/op.
func BenchmarkTelemetry(b *testing.B) {
	ctx := context.Background()
	h := newHarness(b, agentstore.SQLite)
	base := h.New(b)
	s := repo.NewSession()
	if err := base.Sessions().Save(ctx, s); err != nil {
		b.Fatal(err)
	}
	sdkTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
	sdkMP := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	for _, c := range []struct {
		name string
		opts []agentstore.Option
	}{
		{"off", nil},
		{"noop", []agentstore.Option{agentstore.WithTracerProvider(tracenoop.NewTracerProvider()), agentstore.WithMeterProvider(metricnoop.NewMeterProvider())}},
		{"sdk", []agentstore.Option{agentstore.WithTracerProvider(sdkTP), agentstore.WithMeterProvider(sdkMP)}},
	} {
		st := h.Open(b, c.opts...)
		sess := st.Sessions()
		b.Run("Load/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := sess.Load(ctx, s.ID); err != nil {
					b.Fatal(err)
				}
			}
		})
		// a call refused before any SQL: the wrapper's own cost stands out
		q := st.SessionQueue()
		b.Run("Refused/"+c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := q.Dequeue(ctx, s.ID, repo.DequeueParams{Lease: -1}); err == nil {
					b.Fatal("negative lease accepted")
				}
			}
		})
	}
}

// openGormSQLite opens a GORM handle on a SQLite DSN (closed at cleanup).
func openGormSQLite(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	gdb, err := gorm.Open(sqlite.New(sqlite.Config{DriverName: testSQLiteDriver, DSN: dsn}), &gorm.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if db, err := gdb.DB(); err == nil {
			_ = db.Close()
		}
	})
	return gdb
}

// spanAudit is a span processor that checks every span agentstore ends:
// its name, kind, only the documented attribute keys (so no payload, token
// or other id can appear), ids of the right shape, and an Error status
// described by a sentinel class, never by driver text.
type spanAudit struct {
	mu       sync.Mutex
	spans    int
	problems []string
}

var auditKeys = map[attribute.Key]bool{agentstore.AttrDBSystem: true, agentstore.AttrDBOperation: true, agentstore.AttrDBCollection: true,
	agentstore.AttrErrorType: true, agentstore.AttrSessionID: true, agentstore.AttrInstanceID: true, agentstore.AttrOutcome: true}

var errorClasses = map[string]bool{"deadline_exceeded": true, "canceled": true, "stale_version": true, "duplicate_event": true,
	"duplicate": true, "conflict": true, "lock_lost": true, "instance_running": true, "sub_orchestration": true, "orphan": true,
	"invalid_input": true, "corrupt_row": true, "key_not_found": true, "decrypt": true, "schema_behind": true, "lock_timeout": true, "statement_timeout": true, "timeout": true, "retryable": true, "invalid_config": true, "cursor_expired": true, "_OTHER": true}

func (a *spanAudit) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (a *spanAudit) Shutdown(context.Context) error                  { return nil }
func (a *spanAudit) ForceFlush(context.Context) error                { return nil }
func (a *spanAudit) OnEnd(s sdktrace.ReadOnlySpan) {
	var bad []string
	if !strings.HasPrefix(s.Name(), "agentstore.") || s.SpanKind() != trace.SpanKindClient {
		bad = append(bad, fmt.Sprintf("span %q kind %v", s.Name(), s.SpanKind()))
	}
	outcome := ""
	for _, kv := range s.Attributes() {
		switch {
		case !auditKeys[kv.Key]:
			bad = append(bad, fmt.Sprintf("%s: undocumented attribute %s=%q", s.Name(), kv.Key, kv.Value.Emit()))
		case kv.Key == agentstore.AttrSessionID:
			if _, err := uuid.Parse(kv.Value.AsString()); err != nil {
				bad = append(bad, fmt.Sprintf("%s: session id %q", s.Name(), kv.Value.AsString()))
			}
		case kv.Key == agentstore.AttrOutcome:
			outcome = kv.Value.AsString()
		}
	}
	switch st := s.Status(); {
	case outcome == agentstore.OutcomeError && (st.Code != codes.Error || !errorClasses[st.Description]):
		bad = append(bad, fmt.Sprintf("%s: failed call with status %v %q", s.Name(), st.Code, st.Description))
	case outcome != agentstore.OutcomeError && st.Code != codes.Unset:
		bad = append(bad, fmt.Sprintf("%s: outcome %q with status %v", s.Name(), outcome, st.Code))
	case outcome == "":
		bad = append(bad, fmt.Sprintf("%s: no outcome", s.Name()))
	}
	a.mu.Lock()
	a.spans++
	if len(a.problems) < 20 {
		a.problems = append(a.problems, bad...)
	}
	a.mu.Unlock()
}

// TestConformanceTelemetry runs the whole exported conformance suite on
// SQLite with telemetry on (SDK providers, telemetrySuiteOptions), so the
// traced repositories behave exactly as the plain ones, and audits every
// span the suite produces. The telemetry layer sits above the dialects; on
// PostgreSQL the postgres-portable variant of TestConformance runs with it
// on (one whole PostgreSQL run fewer than a variant of its own), and so
// does TestConformance's MariaDB run.
func TestConformanceTelemetry(t *testing.T) {
	t.Parallel()
	requireSuiteVariant(t)
	agentstoretest.Run(t, agentstoretest.SQLite(telemetrySuiteOptions(t)...))
}

// telemetrySuiteOptions returns the options of a conformance run with
// telemetry on: SDK tracer and meter providers whose every span is checked
// by a spanAudit, and at t's cleanup the audit's problems reported and at
// least one span and one recorded call required.
func telemetrySuiteOptions(t *testing.T) []agentstore.Option {
	t.Helper()
	audit := &spanAudit{}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(audit))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Errorf("collect: %v", err)
		}
		if n := histCount(rm, agentstore.MetricCallDuration, nil); n == 0 {
			t.Error("no call recorded")
		}
		audit.mu.Lock()
		defer audit.mu.Unlock()
		if audit.spans == 0 {
			t.Error("no span ended")
		}
		t.Logf("%d spans audited", audit.spans)
		for _, p := range audit.problems {
			t.Error(p)
		}
	})
	return []agentstore.Option{agentstore.WithTracerProvider(tp), agentstore.WithMeterProvider(mp)}
}

// TestPerfTelemetryGaugePlans: the queue gauges' queries sort nothing
// (their LIMITs bound what they read) and find a provider queue's oldest
// item through its claim index, on
// queues of 100,000 rows, half of the session queue finished, without
// statistics and after ANALYZE.
func TestPerfTelemetryGaugePlans(t *testing.T) {
	// fills 100,000-row tables: a scale test, run by CI in its load-test
	// step, without -race (as TestPlanTraps)
	requireLongTests(t)
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.New(t)
		ctx := context.Background()
		db := st.DB(ctx)
		pg := st.Dialect() == agentstore.Postgres
		q := func(base string) string { return quote(st, base) }
		sess := repo.NewSession()
		if err := st.Sessions().Save(ctx, sess); err != nil {
			t.Fatal(err)
		}
		series := "generate_series(1, 100000) AS g(i)"
		uuidExpr := "gen_random_uuid()"
		if !pg {
			series = "(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 100000) SELECT i FROM s) AS g"
			uuidExpr = "lower(hex(randomblob(16)))"
		}
		for _, stmt := range []string{
			"INSERT INTO " + q(models.TableQueue) + " (id, session_id, operation, content, priority, status, attempts, created_at, processed_at)" +
				" SELECT " + uuidExpr + ", '" + sess.ID.String() + "', 'enqueue', 'x', g.i % 4," +
				" CASE WHEN g.i % 2 = 0 THEN 'completed' ELSE 'pending' END, 0, CURRENT_TIMESTAMP," +
				" CASE WHEN g.i % 2 = 0 THEN CURRENT_TIMESTAMP END FROM " + series,
			"INSERT INTO " + q(models.TableWorkerQueue) + " (work_item, visible_at, created_at, attempt_count, instance_id) SELECT '{}', g.i, g.i, 0, '' FROM " + series,
			"INSERT INTO " + q(models.TableOrchestratorQueue) + " (instance_id, work_item, visible_at, created_at, attempt_count)" +
				" SELECT 'i' || g.i, '{}', g.i, g.i, 0 FROM " + series,
		} {
			// a fill that lost its snapshot to a concurrent write of the
			// Store (SQLite's BUSY_SNAPSHOT, ErrConflict) runs again
			err := db.Exec(stmt).Error
			for i := 0; i < 3 && (errors.Is(err, agentstore.ErrConflict) || agentstore.IsRetryable(err)); i++ {
				time.Sleep(50 * time.Millisecond)
				err = db.Exec(stmt).Error
			}
			if err != nil {
				t.Fatalf("fill: %v\n%s", err, stmt)
			}
		}
		for _, phase := range []string{"no statistics", "analysed"} {
			if phase == "analysed" {
				analyzeQueues(t, st)
			}
			for queue, sql := range agentstore.TelemetryGaugeSQL(st, 1700000000000) {
				plan := explain(t, st, sql)
				bad := []string{"Sort"}
				if !pg {
					bad = []string{"USE TEMP B-TREE"}
				}
				for _, b := range bad {
					if strings.Contains(plan, b) {
						t.Errorf("%s queue gauge (%s): plan has %q:\n%s", queue, phase, b, plan)
					}
				}
				// the provider queues' oldest item is one index read in
				// claim order (SQLite may walk the worker queue by rowid)
				if queue != "session" && (pg || queue == "orchestrator") && !strings.Contains(plan, "Index") && !strings.Contains(plan, "INDEX") {
					t.Errorf("%s queue gauge (%s): plan uses no index:\n%s", queue, phase, plan)
				}
			}
		}
	})
}

// TestTelemetryCoversEveryMethod: every method of the four interfaces a
// Store hands out is traced (has its span name), except the provider's
// Name, Version and Admin (no database call).
func TestTelemetryCoversEveryMethod(t *testing.T) {
	have := map[string]bool{}
	for _, n := range agentstore.TelemetrySpanNames() {
		if have[n] {
			t.Errorf("span name %s twice", n)
		}
		have[n] = true
	}
	want := 0
	for name, typ := range map[string]reflect.Type{
		"Sessions":      reflect.TypeFor[repo.Sessions](),
		"SessionQueue":  reflect.TypeFor[repo.SessionQueue](),
		"ChangeFeed":    reflect.TypeFor[repo.ChangeFeed](),
		"Provider":      reflect.TypeFor[duroxide.Provider](),
		"ProviderAdmin": reflect.TypeFor[duroxide.ProviderAdminExt](),
	} {
		for i := range typ.NumMethod() {
			m := typ.Method(i).Name
			if name == "Provider" && (m == "Name" || m == "Version" || m == "Admin") {
				continue
			}
			want++
			if !have["agentstore."+name+"."+m] {
				t.Errorf("%s.%s is not traced: add its wrapper (telemetry_sessions.go / telemetry_provider.go) and its row in opDefs", name, m)
			}
		}
	}
	if want != len(have) {
		t.Errorf("%d span names for %d methods", len(have), want)
	}
}

// TestTelemetryMeterOnlyLeavesCallerSpan: a Store with metrics but no
// tracer provider adds nothing to the caller's span (no child span, no
// wake-up event) while its fetch is woken.
func TestTelemetryMeterOnlyLeavesCallerSpan(t *testing.T) {
	h := newHarness(t, agentstore.SQLite)
	reader := sdkmetric.NewManualReader()
	st := h.New(t, agentstore.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		agentstore.WithPollInterval(time.Minute))
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	ctx, caller := tp.Tracer("caller").Start(context.Background(), "caller")
	done := make(chan error, 1)
	go func() {
		_, err := st.Provider().FetchWorkItem(ctx, time.Minute, 40*time.Second, nil, duroxide.TagFilter{})
		done <- err
	}()
	e := &telEnv{reader: reader}
	for i := 0; ; i++ {
		if n, _ := intValue(e.collect(t), agentstore.MetricWaiting, map[string]string{"agentstore.queue": "worker"}); n == 1 {
			break
		}
		if i > 2000 {
			t.Fatal("the fetch never waited")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := st.Provider().EnqueueForWorker(context.Background(), &duroxide.ActivityExecute{Instance: "m", ExecutionID: 1, ID: 1, Name: "act", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	caller.End()
	if n, _ := intValue(e.collect(t), agentstore.MetricWakeups, map[string]string{"agentstore.queue": "worker"}); n < 1 {
		t.Errorf("wake-ups %d, want at least 1", n)
	}
	got := spans.GetSpans()
	if len(got) != 1 || len(got[0].Events) != 0 {
		t.Errorf("the caller's trace: %d spans, events %v; want its own span alone, untouched", len(got), got[0].Events)
	}
}
