package agentstore

import (
	"github.com/agentstore/agentstore/internal/engine"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// InstrumentationName is the name of the Tracer and the Meter a Store
// asks its providers for.
const InstrumentationName = engine.InstrumentationName

// Attribute keys of agentstore's spans and metrics: OpenTelemetry's
// database semantic conventions (db.system.name, db.operation.name,
// db.collection.name, error.type) and agentstore's own.
const (
	AttrDBSystem     = engine.AttrDBSystem     // "postgresql" or "sqlite"
	AttrDBOperation  = engine.AttrDBOperation  // the call's operation, e.g. "append_messages", "fetch_work_item"
	AttrDBCollection = engine.AttrDBCollection // the table the call mainly works on, prefixed (and schema-qualified)
	AttrErrorType    = engine.AttrErrorType    // the error's sentinel class, e.g. "lock_lost"; see docs/telemetry.md
	AttrSessionID    = engine.AttrSessionID    // the session a session-API call concerns
	AttrInstanceID   = engine.AttrInstanceID   // the orchestration instance a provider call concerns
	AttrOutcome      = engine.AttrOutcome      // "ok", "empty", "not_found" or "error"
	AttrQueue        = engine.AttrQueue        // "session", "orchestrator" or "worker"
)

// Outcomes of a call (AttrOutcome).
const (
	OutcomeOK       = engine.OutcomeOK       // the call succeeded
	OutcomeEmpty    = engine.OutcomeEmpty    // a fetch or dequeue found nothing (not an error)
	OutcomeNotFound = engine.OutcomeNotFound // ErrNotFound (not an error status: an answer)
	OutcomeError    = engine.OutcomeError    // any other error; the span's status is Error
)

// Queue names (AttrQueue).
const (
	QueueSession      = engine.QueueSession
	QueueOrchestrator = engine.QueueOrchestrator
	QueueWorker       = engine.QueueWorker
)

// Metric names of a Store's Meter.
const (
	MetricCallDuration = engine.MetricCallDuration // histogram, s: every repository call; AttrDBSystem, AttrDBOperation, AttrOutcome, AttrErrorType (errors)
	MetricRetries      = engine.MetricRetries      // counter, {retry}: internal retries of a retryable failure (fetch, orchestration ack); AttrDBSystem, AttrDBOperation
	MetricLockLost     = engine.MetricLockLost     // counter, {call}: calls refused because their lock or lease is no longer held (ErrLockLost); AttrDBSystem, AttrDBOperation, AttrQueue
	MetricRedelivered  = engine.MetricRedelivered  // counter, {item}: fetched or dequeued items delivered before (attempt count > 1); AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricWakeups      = engine.MetricWakeups      // counter, {wakeup}: waiting fetches woken by a wake-up signal; AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricWaiting      = engine.MetricWaiting      // up-down counter, {fetch}: fetches waiting for work now; AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricQueueDepth   = engine.MetricQueueDepth   // observable gauge, {item}: visible, claimable items (capped at TelemetryDepthCap); AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
	MetricQueueAge     = engine.MetricQueueAge     // observable gauge, s: age of the oldest visible, claimable item; AttrDBSystem, AttrQueue, AttrDBCollection (the queue table)
)

// TelemetryDepthCap bounds the rows the queue gauges' callback reads per
// queue: a depth of TelemetryDepthCap means "at least that many".
const TelemetryDepthCap = engine.TelemetryDepthCap

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
	return engine.WithTracerProvider(tp)
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
	return engine.WithMeterProvider(mp)
}
