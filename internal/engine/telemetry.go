package engine

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Telemetry: OpenTelemetry traces and metrics of a Store, through the
// providers the caller passes (WithTracerProvider, WithMeterProvider).
// Nothing is registered globally. Without either option the Store hands
// out its repositories unwrapped: no span, attribute, clock read or
// allocation is added to any call (see TestTelemetryOffAddsNothing).

// InstrumentationName is the name of the Tracer and the Meter a Store
// asks its providers for.
const InstrumentationName = "github.com/agentstore/agentstore"

// Attribute keys of agentstore's spans and metrics: OpenTelemetry's
// database semantic conventions (db.system.name, db.operation.name,
// db.collection.name, error.type) and agentstore's own.
const (
	AttrDBSystem     = attribute.Key("db.system.name")         // "postgresql" or "sqlite"
	AttrDBOperation  = attribute.Key("db.operation.name")      // the call's operation, e.g. "append_messages", "fetch_work_item"
	AttrDBCollection = attribute.Key("db.collection.name")     // the table the call mainly works on, prefixed (and schema-qualified)
	AttrErrorType    = attribute.Key("error.type")             // the error's sentinel class, e.g. "lock_lost"; see docs/telemetry.md
	AttrSessionID    = attribute.Key("agentstore.session_id")  // the session a session-API call concerns
	AttrInstanceID   = attribute.Key("agentstore.instance_id") // the orchestration instance a provider call concerns
	AttrOutcome      = attribute.Key("agentstore.outcome")     // "ok", "empty", "not_found" or "error"
	AttrQueue        = attribute.Key("agentstore.queue")       // "session", "orchestrator" or "worker"
)

// Outcomes of a call (AttrOutcome).
const (
	OutcomeOK       = "ok"        // the call succeeded
	OutcomeEmpty    = "empty"     // a fetch or dequeue found nothing (not an error)
	OutcomeNotFound = "not_found" // ErrNotFound (not an error status: an answer)
	OutcomeError    = "error"     // any other error; the span's status is Error
)

// Queue names (AttrQueue).
const (
	QueueSession      = "session"
	QueueOrchestrator = "orchestrator"
	QueueWorker       = "worker"
)

// Metric names of a Store's Meter.
const (
	MetricCallDuration = "agentstore.call.duration"      // histogram, s: every repository call; AttrDBSystem, AttrDBOperation, AttrOutcome, AttrErrorType (errors)
	MetricRetries      = "agentstore.retries"            // counter, {retry}: internal retries of a retryable failure (fetch, orchestration ack); AttrDBSystem, AttrDBOperation
	MetricLockLost     = "agentstore.lock.lost"          // counter, {call}: calls refused because their lock or lease is no longer held (ErrLockLost); AttrDBSystem, AttrDBOperation, AttrQueue
	MetricRedelivered  = "agentstore.queue.redeliveries" // counter, {item}: fetched or dequeued items delivered before (attempt count > 1); AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricWakeups      = "agentstore.wakeups"            // counter, {wakeup}: waiting fetches woken by a wake-up signal; AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricWaiting      = "agentstore.fetch.waiting"      // up-down counter, {fetch}: fetches waiting for work now; AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricQueueDepth   = "agentstore.queue.depth"        // observable gauge, {item}: visible, claimable items (capped at TelemetryDepthCap); AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricQueueAge     = "agentstore.queue.oldest_age"   // observable gauge, s: age of the oldest visible, claimable item; AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
)

// TelemetryDepthCap bounds the rows the queue gauges' callback reads per
// queue: a depth of TelemetryDepthCap means "at least that many".
const TelemetryDepthCap = 10000

type telemetryConfig struct {
	tp trace.TracerProvider
	mp metric.MeterProvider
}

// WithTracerProvider makes the Store trace its repository calls through
// tp (nothing is registered globally): one span (kind Client) per call of
// a method of Sessions(), SessionQueue() (also of a TenantView) and
// Provider()/ProviderAdmin(), named "agentstore." + interface + "." +
// method ("agentstore.Sessions.AppendMessages",
// "agentstore.SessionQueue.Dequeue", "agentstore.Provider.FetchWorkItem",
// "agentstore.ProviderAdmin.ListInstances"), child of the span in the
// call's context. Attributes: db.system.name ("postgresql", "sqlite"),
// db.operation.name (the operation, as in the errors' Op), db.collection.name
// (the table, where one is the call's subject), agentstore.session_id or
// agentstore.instance_id (when the call concerns one session or instance),
// agentstore.outcome ("ok", "empty" for a fetch or dequeue that found
// nothing, "not_found", "error"). No content, message, work item, token,
// owner or other id is recorded. A failed call (not ErrNotFound) has
// status Error, described by its error.type: the sentinel class
// ("invalid_input", "lock_lost", "retryable", "stale_version",
// "duplicate", "conflict", "corrupt_row", "schema_behind", "lock_timeout",
// "statement_timeout", "deadline_exceeded", "canceled", ..., "_OTHER"),
// never the driver's
// text. A nil tp is ErrInvalidConfig.
//
// Cost: without this option and WithMeterProvider the Store hands out its
// repositories unwrapped: nothing at all is added to a call. With them a
// call pays for its span and measurements: measured on a session Load on
// SQLite, +2 allocations with noop providers and +11 with the SDK's
// (296 without), and about 0.5 µs (noop) or 4 µs (SDK) per call.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *Config) error {
		if tp == nil {
			return configf("tracer provider must not be nil")
		}
		c.telemetry.tp = tp
		return nil
	})
}

// WithMeterProvider makes the Store record metrics through mp (nothing is
// registered globally), on the Meter named InstrumentationName:
//
//   - agentstore.call.duration (histogram, s): every repository call
//     (those WithTracerProvider traces); attributes db.system.name,
//     db.operation.name, agentstore.outcome, error.type for errors.
//   - agentstore.retries (counter): internal retries of a retryable
//     failure (fetches and the orchestration ack retry up to 3 times; each
//     retry also adds an "agentstore.retry" event to the call's span);
//     db.system.name, db.operation.name.
//   - agentstore.lock.lost (counter): calls refused with ErrLockLost (also
//     ErrInvalidLockToken): the lease or lock expired (and may have been
//     re-claimed), or the item was acked, abandoned, cancelled or deleted
//     meanwhile; db.system.name, db.operation.name, agentstore.queue.
//   - agentstore.queue.redeliveries (counter): items a fetch or dequeue
//     handed out again (attempt count above 1: a lease or lock expired, or
//     the item was abandoned or released without undoing its attempt);
//     db.system.name, agentstore.queue, db.collection.name (the queue's
//     table, as for the wake-up, waiting and gauge metrics below).
//   - agentstore.wakeups (counter): waiting fetches woken by a wake-up (an
//     enqueue through this Store, or LISTEN/NOTIFY or the SQLite
//     data_version watcher for other Stores' commits) before their
//     re-check timer (each wake-up also adds an "agentstore.wakeup" event
//     to the fetch's span); db.system.name, agentstore.queue.
//   - agentstore.fetch.waiting (up-down counter): fetches waiting for work
//     now; db.system.name, agentstore.queue.
//   - agentstore.queue.depth (observable gauge) and
//     agentstore.queue.oldest_age (observable gauge, s, 0 for an empty
//     queue) per queue (agentstore.queue "session", "orchestrator",
//     "worker"): visible, claimable items (not leased or locked, or whose
//     lease or lock expired) and the age of the oldest, from its
//     visible time (provider queues) or creation (session queue), on the
//     Store's clock. Only when a reader collects, the callback runs four
//     small queries (one per provider queue, two for the session queue);
//     each counts at most TelemetryDepthCap matching rows (a depth of
//     TelemetryDepthCap means at least that many); a provider queue's
//     oldest item is its claim order's first (one index read, like a
//     claim), the session queue's the oldest among the rows counted. No
//     sort; a count stops at the cap (a queue holding mostly delayed or
//     locked items is read further, up to its end). The callback registers
//     at Open/New and unregisters at Close.
//
// A nil mp is ErrInvalidConfig.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *Config) error {
		if mp == nil {
			return configf("meter provider must not be nil")
		}
		c.telemetry.mp = mp
		return nil
	})
}

// telemetry is a Store's instrumentation; nil when neither option is set.
type telemetry struct {
	s      *Store
	tracer trace.Tracer // nil: no traces
	meter  metric.Meter // nil: no metrics
	system attribute.KeyValue
	ops    []opInfo

	duration    metric.Float64Histogram
	retries     metric.Int64Counter
	lockLost    metric.Int64Counter
	redelivered metric.Int64Counter
	wakeups     metric.Int64Counter
	waiting     metric.Int64UpDownCounter
	reg         metric.Registration
	// per-queue measurement options of the queue metrics
	queueOpts map[string]metric.MeasurementOption

	provOnce sync.Once
	prov     *tracedProvider
}

// opInfo is one instrumented method, with its span options and metric
// attribute sets precomputed.
type opInfo struct {
	span      string
	op        string
	queue     string
	retries   bool // the call may retry internally (withRetry): see noteRetry
	startOpts []trace.SpanStartOption
	outcome   map[string]metric.MeasurementOption        // ok, empty, not_found
	errAttrs  []attribute.KeyValue                       // base attributes of an error's set
	errOpts   []atomic.Pointer[metric.MeasurementOption] // per error class, built on first use
	opOpt     metric.MeasurementOption                   // retries
	lostOpt   metric.MeasurementOption                   // lock lost (queue ops)
}

// newTelemetry builds the Store's instrumentation, nil without providers.
func newTelemetry(s *Store) (*telemetry, error) {
	tc := s.cfg.telemetry
	if tc.tp == nil && tc.mp == nil {
		return nil, nil
	}
	t := &telemetry{s: s, system: AttrDBSystem.String(s.d.SemconvSystem())}
	if tc.tp != nil {
		t.tracer = tc.tp.Tracer(InstrumentationName, trace.WithInstrumentationVersion(ProviderVersion))
	}
	if tc.mp != nil {
		t.meter = tc.mp.Meter(InstrumentationName, metric.WithInstrumentationVersion(ProviderVersion))
		if err := t.instruments(); err != nil {
			return nil, configf("telemetry: %v", err)
		}
	}
	t.ops = make([]opInfo, len(opDefs()))
	for i, d := range opDefs() {
		o := &t.ops[i]
		o.span, o.op, o.queue = "agentstore."+d.iface+"."+d.method, d.op, d.queue
		o.retries = retrying(d.op)
		attrs := []attribute.KeyValue{t.system, AttrDBOperation.String(d.op)}
		if d.table != "" {
			attrs = append(attrs, AttrDBCollection.String(s.Table(d.table)))
		}
		o.startOpts = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...)}
		base := []attribute.KeyValue{t.system, AttrDBOperation.String(d.op)}
		o.errAttrs = base
		o.errOpts = make([]atomic.Pointer[metric.MeasurementOption], len(errorClasses()))
		o.outcome = map[string]metric.MeasurementOption{}
		for _, oc := range []string{OutcomeOK, OutcomeEmpty, OutcomeNotFound} {
			o.outcome[oc] = metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], AttrOutcome.String(oc))...))
		}
		o.opOpt = metric.WithAttributeSet(attribute.NewSet(base...))
		if d.queue != "" {
			o.lostOpt = metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], AttrQueue.String(d.queue))...))
		}
	}
	return t, nil
}

func (t *telemetry) instruments() error {
	m := t.meter
	var err error
	var errs []error
	t.duration, err = m.Float64Histogram(MetricCallDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of agentstore repository calls."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	errs = append(errs, err)
	t.retries, err = m.Int64Counter(MetricRetries, metric.WithUnit("{retry}"),
		metric.WithDescription("Internal retries of retryable database failures."))
	errs = append(errs, err)
	t.lockLost, err = m.Int64Counter(MetricLockLost, metric.WithUnit("{call}"),
		metric.WithDescription("Calls refused because their lock or lease was no longer held."))
	errs = append(errs, err)
	t.redelivered, err = m.Int64Counter(MetricRedelivered, metric.WithUnit("{item}"),
		metric.WithDescription("Items handed out again by a fetch or dequeue (attempt count above 1)."))
	errs = append(errs, err)
	t.wakeups, err = m.Int64Counter(MetricWakeups, metric.WithUnit("{wakeup}"),
		metric.WithDescription("Waiting fetches woken by a wake-up signal."))
	errs = append(errs, err)
	t.waiting, err = m.Int64UpDownCounter(MetricWaiting, metric.WithUnit("{fetch}"),
		metric.WithDescription("Fetches waiting for work."))
	errs = append(errs, err)
	depth, err := m.Int64ObservableGauge(MetricQueueDepth, metric.WithUnit("{item}"),
		metric.WithDescription("Visible, claimable queue items (capped)."))
	errs = append(errs, err)
	age, err := m.Float64ObservableGauge(MetricQueueAge, metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest visible, claimable queue item."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.queueOpts = map[string]metric.MeasurementOption{}
	for q, table := range map[string]string{QueueSession: models.TableQueue, QueueOrchestrator: models.TableOrchestratorQueue, QueueWorker: models.TableWorkerQueue} {
		t.queueOpts[q] = metric.WithAttributeSet(attribute.NewSet(t.system, AttrQueue.String(q), AttrDBCollection.String(t.s.Table(table))))
	}
	t.reg, err = m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		return t.observeQueues(ctx, o, depth, age)
	}, depth, age)
	return err
}

// close unregisters the queue gauges' callback.
func (t *telemetry) close() {
	if t != nil && t.reg != nil {
		_ = t.reg.Unregister()
	}
}

// call is one instrumented call in flight.
type call struct {
	t     *telemetry
	o     *opInfo
	ctx   context.Context
	span  trace.Span
	start time.Time
}

// callKey carries the *opInfo of a call that may retry internally
// (withRetry reads it: noteRetry).
type callKey struct{}

// retrying lists the operations that run withRetry.
func retrying(op string) bool {
	return op == "fetch_orchestration_item" || op == "fetch_work_item" || op == "ack_orchestration_item"
}

// start begins call id: its span (child of ctx's) and its clock.
func (t *telemetry) start(ctx context.Context, id opID) (context.Context, call) {
	o := &t.ops[id]
	c := call{t: t, o: o}
	if t.tracer != nil {
		ctx, c.span = t.tracer.Start(ctx, o.span, o.startOpts...)
	}
	if o.retries {
		ctx = context.WithValue(ctx, callKey{}, &retryRef{t, o})
	}
	if t.meter != nil {
		c.start = time.Now()
	}
	c.ctx = ctx
	return ctx, c
}

type retryRef struct {
	t *telemetry
	o *opInfo
}

// noteRetry counts an internal retry of the call whose context is ctx
// and adds an "agentstore.retry" event to its span (a no-op unless ctx is
// an instrumented call's).
func noteRetry(ctx context.Context) {
	if r, ok := ctx.Value(callKey{}).(*retryRef); ok {
		if r.t.meter != nil {
			r.t.retries.Add(ctx, 1, r.o.opOpt)
		}
		if r.t.tracer != nil { // else the span in ctx is the caller's
			if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
				sp.AddEvent("agentstore.retry")
			}
		}
	}
}

func (c call) recording() bool { return c.span != nil && c.span.IsRecording() }

// session records the session the call concerns.
func (c call) session(id uuid.UUID) {
	if c.recording() && id != uuid.Nil {
		c.span.SetAttributes(AttrSessionID.String(id.String()))
	}
}

// instance records the instance the call concerns.
func (c call) instance(id string) {
	if c.recording() && id != "" {
		c.span.SetAttributes(AttrInstanceID.String(id))
	}
}

// end finishes the call: outcome, status, duration, lock-lost count.
func (c call) end(err error) { c.finish(err, false) }

// endEmpty finishes a fetch or dequeue; empty: it found nothing.
func (c call) endEmpty(err error, empty bool) { c.finish(err, empty) }

// redelivered counts an item handed out again (attempts > 1).
func (c call) redelivered(attempts int64, queue string) {
	if attempts > 1 && c.t.meter != nil {
		c.t.redelivered.Add(c.ctx, 1, c.t.queueOpts[queue])
	}
}

func (c call) finish(err error, empty bool) {
	outcome, class := OutcomeOK, 0
	switch {
	case err != nil:
		class = errorType(err)
		if class == classNotFound {
			outcome = OutcomeNotFound
		} else {
			outcome = OutcomeError
		}
	case empty:
		outcome = OutcomeEmpty
	}
	if c.t.meter != nil {
		opt := c.o.outcome[outcome]
		if outcome == OutcomeError {
			opt = c.o.errorOpt(class)
			if class == classLockLost && c.o.lostOpt != nil {
				c.t.lockLost.Add(c.ctx, 1, c.o.lostOpt)
			}
		}
		c.t.duration.Record(c.ctx, time.Since(c.start).Seconds(), opt)
	}
	if c.span == nil {
		return
	}
	if c.span.IsRecording() {
		if outcome == OutcomeError {
			name := errorClasses()[class].name
			c.span.SetAttributes(AttrOutcome.String(outcome), AttrErrorType.String(name))
			c.span.SetStatus(codes.Error, name)
		} else {
			c.span.SetAttributes(AttrOutcome.String(outcome))
		}
	}
	c.span.End()
}

// errorOpt returns the measurement option of a failed call of class
// (built on first use).
func (o *opInfo) errorOpt(class int) metric.MeasurementOption {
	if p := o.errOpts[class].Load(); p != nil {
		return *p
	}
	opt := metric.WithAttributeSet(attribute.NewSet(append(o.errAttrs[:len(o.errAttrs):len(o.errAttrs)],
		AttrOutcome.String(OutcomeError), AttrErrorType.String(errorClasses()[class].name))...))
	o.errOpts[class].Store(&opt)
	return opt
}

// errorClasses are the values of AttrErrorType, in the order errorType
// tests them (the first the error matches wins).
func errorClasses() []errorClass {
	return []errorClass{
		{"deadline_exceeded", context.DeadlineExceeded},
		{"canceled", context.Canceled},
		{"stale_version", ErrStaleVersion},
		{"duplicate_event", ErrDuplicateEvent},
		{"duplicate", ErrDuplicate},
		{"conflict", ErrConflict},
		{"lock_lost", ErrLockLost},
		{"instance_running", ErrInstanceRunning},
		{"sub_orchestration", ErrSubOrchestration},
		{"orphan", ErrOrphan},
		{"invalid_input", ErrInvalidInput},
		{"corrupt_row", ErrCorruptRow},
		{"schema_behind", ErrSchemaBehind},
		{"lock_timeout", ErrLockTimeout},
		{"statement_timeout", ErrStatementTimeout},
		{"timeout", ErrTimeout},
		{"retryable", ErrRetryable},
		{"not_found", ErrNotFound},
		{"invalid_config", ErrInvalidConfig},
		{"key_not_found", ErrKeyNotFound},
		{"decrypt", ErrDecrypt},
		{"cursor_expired", ErrCursorExpired},
		{"_OTHER", nil},
	}
}

// errorClass is one value of AttrErrorType and the sentinel it stands for.
type errorClass struct {
	name     string
	sentinel error
}

// Indexes into errorClasses used in code (TestErrorClassIndexes checks them).
const (
	classLockLost  = 6
	classRetryable = 16
	classNotFound  = 17
	classOther     = 22
)

// classIndex returns the index of the class called name, -1 when none.
func classIndex(name string) int {
	for i, c := range errorClasses() {
		if c.name == name {
			return i
		}
	}
	panic("agentstore: unknown error class " + name)
}

// errorType returns the index in errorClasses of err's sentinel class
// (AttrErrorType), never its text. The *repo.Error and
// *duroxide.ProviderError envelopes are peeled first (their Unwrap
// allocates).
func errorType(err error) int {
	retryable := false
	for {
		if re, ok := err.(*repo.Error); ok {
			retryable, err = retryable || re.Retryable, re.Err
			continue
		}
		if pe, ok := err.(*duroxide.ProviderError); ok {
			retryable, err = retryable || pe.Retryable, pe.Err
			continue
		}
		break
	}
	if err != nil {
		for i, c := range errorClasses()[:classOther] {
			if errors.Is(err, c.sentinel) {
				return i
			}
		}
	}
	if retryable {
		return classRetryable
	}
	return classOther
}

// instrumentSignals counts wake-ups delivered to waiting fetches (and
// waiting Dequeues) and the fetches waiting (called once, when the
// provider is built).
func (t *telemetry) instrumentSignals(p *gormProvider) {
	if t == nil {
		return
	}
	for _, x := range []struct {
		sig *signal
		q   string
	}{{p.orch, QueueOrchestrator}, {p.work, QueueWorker}, {p.queue, QueueSession}} {
		opt := t.queueOpts[x.q]
		if t.meter != nil {
			prev := x.sig.waiting
			x.sig.waiting = func(delta int32) {
				if prev != nil {
					prev(delta)
				}
				t.waiting.Add(context.Background(), int64(delta), opt)
			}
		}
		x.sig.onWake = func(ctx context.Context) {
			if t.meter != nil {
				t.wakeups.Add(ctx, 1, opt)
			}
			if t.tracer != nil { // else the span in ctx is the caller's
				if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
					sp.AddEvent("agentstore.wakeup")
				}
			}
		}
	}
}

// woke is called by longPoll when a wake-up ended a fetch's wait.
func (s *signal) woke(ctx context.Context) {
	if s.onWake != nil {
		s.onWake(ctx)
	}
}

// gaugeQuery is one query of the queue gauges' callback: it returns one
// row, n and oldest (depth and the oldest item's time) or, for the
// session queue's second query, the oldest item's created_at.
type gaugeQuery struct {
	queue, sql string
	args       []any
}

// Predicates of the queue gauges: visible, claimable items, as the claims
// and GetQueueDepths see them.
const (
	providerVisible = ` WHERE visible_at <= ? AND (lock_token IS NULL OR locked_until <= ?)`
	sessionVisible  = ` WHERE processed_at IS NULL AND (status = 'pending' OR (status = 'processing' AND leased_until < ?))`
)

// gaugeQueries returns the callback's queries at now (Store clock, ms).
// Each counts at most TelemetryDepthCap matching rows (a LIMIT without
// ORDER BY: the scan stops there). The provider queues' oldest item is
// their claim order's first (one index read, as a claim); the session
// queue's is the lowest seq among the counted rows (read through its
// index of unfinished items where the planner picks it), its created_at
// then read by primary key.
func gaugeQueries(s *Store, now int64) []gaugeQuery {
	oq, wq, qt := s.quoted(models.TableOrchestratorQueue), s.quoted(models.TableWorkerQueue), s.quoted(models.TableQueue)
	return []gaugeQuery{
		{QueueOrchestrator, `SELECT (SELECT COUNT(*) FROM (SELECT 1 AS one FROM ` + oq + providerVisible + ` LIMIT ?) x) AS n,` +
			` (SELECT visible_at FROM ` + oq + providerVisible + ` ORDER BY visible_at, id LIMIT 1) AS oldest`,
			[]any{now, now, TelemetryDepthCap, now, now}},
		{QueueWorker, `SELECT (SELECT COUNT(*) FROM (SELECT 1 AS one FROM ` + wq + providerVisible + ` LIMIT ?) x) AS n,` +
			` (SELECT visible_at FROM ` + wq + providerVisible + ` ORDER BY id LIMIT 1) AS oldest`,
			[]any{now, now, TelemetryDepthCap, now, now}},
		{QueueSession, `SELECT COUNT(*) AS n, MIN(seq) AS oldest FROM (SELECT seq FROM ` + qt + sessionVisible + ` LIMIT ?) x`,
			[]any{now, TelemetryDepthCap}},
		// the created_at of the oldest (by seq) of those rows, by primary key
		{QueueSession, `SELECT created_at FROM ` + qt + ` WHERE seq = ?`, nil},
	}
}

// observeQueues is the queue gauges' callback (see WithMeterProvider).
func (t *telemetry) observeQueues(ctx context.Context, o metric.Observer, depth metric.Int64Observable, age metric.Float64Observable) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s := t.s
	db := s.db.WithContext(ctx)
	now := s.nowMS()
	qs := gaugeQueries(s, now)
	var errs []error
	for _, q := range qs[:3] {
		var row struct {
			N      int64
			Oldest *int64
		}
		if err := db.Raw(q.sql, q.args...).Scan(&row).Error; err != nil {
			errs = append(errs, perr("telemetry_queue_depth", err))
			continue
		}
		ageS := 0.0
		if row.Oldest != nil && q.queue != QueueSession {
			ageS = float64(max(now-*row.Oldest, 0)) / 1000
		}
		if row.Oldest != nil && q.queue == QueueSession {
			var oldest []models.QueueItem
			if err := db.Raw(qs[3].sql, *row.Oldest).Scan(&oldest).Error; err != nil {
				errs = append(errs, perr("telemetry_queue_depth", err))
				continue
			}
			if len(oldest) > 0 {
				ageS = max(time.UnixMilli(now).Sub(oldest[0].CreatedAt).Seconds(), 0)
			}
		}
		o.ObserveInt64(depth, row.N, t.queueOpts[q.queue])
		o.ObserveFloat64(age, ageS, t.queueOpts[q.queue])
	}
	return errors.Join(errs...)
}
