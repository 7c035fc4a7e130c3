package duroxide

import (
	"context"
	"time"

	"github.com/agentstore/agentstore/repo"
)

// Provider is the storage contract of a durable-orchestration runtime
// (the Provider interface of duroxide): an orchestrator queue whose messages are
// locked per instance in turns, an append-only history per execution, a
// worker peek-lock queue with optional session affinity, and custom status.
//
// Every error is a *ProviderError. Errors matching ErrRetryable are
// transient (deadlock, serialization failure, busy SQLite, lost connection,
// pool timeout, a lock wait past the Store's lock timeout: ErrLockTimeout);
// all others are permanent (a statement past the Store's statement timeout
// matches ErrStatementTimeout; a call past the caller's own deadline matches
// context.DeadlineExceeded). Lock-token failures match
// ErrInvalidLockToken (and ErrLockLost); input refused before any SQL
// matches ErrInvalidInput; undecodable stored rows match ErrCorruptRow.
type Provider interface {
	// Name returns the provider's name.
	Name() string
	// Version returns the provider's version.
	Version() string

	// FetchOrchestrationItem locks one instance that has visible messages
	// and returns its history and every visible, unlocked message of it
	// (each message's attempt count +1; AttemptCount is the batch maximum).
	// Messages arriving later are not in the batch and survive the ack.
	// While the lock (lockTimeout) lives no other fetch returns the
	// instance. A fetch that loses a race moves on to the next instance.
	// Instances are taken oldest visible message first; in agentstore on
	// PostgreSQL a fetch that starts while n other fetches of the same
	// Store are claiming (n at most 3) takes the (n+1)-th eligible
	// instance, or the last when there are fewer (the first ones are
	// likely theirs).
	// filter (nil = none) skips instances pinned to versions outside its
	// ranges without locking them. When nothing is eligible it waits up to
	// pollTimeout for work and then returns (nil, nil). Undecodable history
	// is reported in HistoryError, never dropped; an undecodable message
	// returns an ErrCorruptRow error while the lock is held until it expires.
	// KVSnapshot holds the instance's key-value store as merged by its
	// completed executions (not the current execution's writes).
	// lockTimeout is rounded up to whole milliseconds; the internal retries
	// of retryable failures (50, 100, 150 ms) stop at the poll's deadline
	// (pollTimeout 0: all three are made).
	// The lock lasts lockTimeout from a clock reading taken after the claim
	// waited for anything: when the claim took longer than a slack of
	// lockTimeout/20 (at most 100 ms), the lock is re-stamped to end
	// lockTimeout after the fetch's clock at that point, so the returned
	// lock always has at least lockTimeout minus the slack to run (an ack,
	// abandon or renew right away succeeds). A claim whose lock another
	// fetcher took over meanwhile is not returned. History holds the
	// events exactly as acked or appended (every field, never restamped).
	// A fetch whose ctx ends returns ctx's error and no item: an instance
	// it claimed is given back at once (unlocked, its messages' attempts
	// uncounted), never left locked until its lock timeout. (On a
	// networked database a claim in flight runs to its end first, for at
	// most 1 s more, so its outcome is known.)
	FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *DispatcherCapabilityFilter) (*OrchestrationItem, error)
	// AckOrchestrationItem commits a turn atomically: validates and
	// consumes the lock, creates the instance (only when the metadata names
	// orchestration and version) and execution, appends the history delta,
	// updates status/output/completed_at, pinned version and custom status,
	// applies the KeyValueSet/KeyValueCleared/KeyValuesCleared events of the
	// delta in history order to the current execution's key-value writes
	// and, for a terminal status (Completed, Failed, ContinuedAsNew), merges
	// them into the instance's store (cleared keys deleted), inserts worker
	// items, then deletes cancelled activities, inserts orchestrator items,
	// and deletes exactly the fetched batch. The execution row is written
	// unless the batch is a true orphan (no instance row, no history stored
	// or in the ack, no StartOrchestration/ContinueAsNew in the batch).
	// Errors:
	// ErrInvalidLockToken (unknown, expired or already used token; of two
	// concurrent acks with one token exactly one succeeds), ErrDuplicateEvent
	// (everything rolled back, lock kept; the message names instance,
	// execution and stored event ids), ErrInvalidInput (also for KV events
	// over the limits: more than MaxKVKeys keys set, a value over
	// MaxKVValueBytes, NUL or invalid UTF-8 in a key or value).
	AckOrchestrationItem(ctx context.Context, lockToken string, ack OrchestrationAck) error
	// AbandonOrchestrationItem releases the lock without committing; the
	// batch becomes visible again after delay (0 = now). ignoreAttempt
	// undoes the fetch's attempt increment (never below 0).
	// ErrInvalidLockToken if the token is unknown.
	AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error
	// RenewOrchestrationItemLock extends a live lock to now+extendFor
	// (millisecond precision, rounded up). ErrInvalidLockToken if it expired or is unknown.
	RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error

	// Read returns the history of the newest execution of instance, ordered
	// by event id, each event exactly as acked or appended (every field,
	// including duroxide_version and source_event_id); empty for an
	// unknown instance. ErrCorruptRow if a stored
	// event cannot be decoded. The whole history in one result, each
	// event decoded once; ProviderAdminExt.ReadHistoryPage reads a long
	// history in pages.
	Read(ctx context.Context, instance string) ([]Event, error)
	// ReadWithExecution returns the history of one execution, like Read.
	ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]Event, error)
	// AppendWithExecution appends events to an execution's history;
	// events whose id already exists are ignored. ErrInvalidInput for
	// event id 0.
	AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []Event) error

	// EnqueueForOrchestrator adds a message to the routed instance's
	// orchestrator queue, visible after delay (0 = now); a TimerFired is
	// visible at its fire time. It never creates an instance.
	// ErrInvalidInput for ActivityExecute.
	EnqueueForOrchestrator(ctx context.Context, item WorkItem, delay time.Duration) error
	// EnqueueForWorker adds an item to the worker queue (FIFO).
	EnqueueForWorker(ctx context.Context, item WorkItem) error
	// FetchWorkItem peek-locks the oldest eligible worker item for
	// lockTimeout, or waits up to pollTimeout and returns (nil, nil).
	// Untagged items (the zero TagFilter) are taken in the order they
	// became visible, oldest first (an abandoned item becomes visible again
	// when it is abandoned, or after its delay); other tag filters take
	// items in enqueue order.
	// Without session config, session items are invisible; with it, items
	// of sessions leased by another owner are skipped and fetching a
	// session item claims or extends the session lease for
	// session.OwnerID. tags restricts activity tags (zero value: untagged only).
	// Concurrent fetches without session config may be claimed together in
	// one statement (group commit): each still gets an item of its own
	// (never one another fetch got), with its own lock token and lock end,
	// the fetches served oldest item first.
	// As for FetchOrchestrationItem, the item lock (and a session lease the
	// fetch claimed or extended) is re-stamped after a claim that took
	// longer than the slack, so it has at least lockTimeout minus the
	// slack to run when the call returns.
	// A fetch whose ctx ends returns ctx's error and no item: an item it
	// claimed or was handed is given back at once (unlocked, the attempt
	// uncounted), never left locked until its lock timeout; so is a
	// session lease the fetch took for session.OwnerID, unless the owner
	// held that session before the fetch (then it keeps it). (On a networked
	// database a claim statement in flight runs to its end first, for at
	// most 1 s more, so its outcome is known.)
	// In agentstore, an orchestration ack of the same Store may enqueue an
	// activity already leased to a fetch waiting without session config
	// and for untagged items, and hand the lease over in-process; such a
	// lease is as a claimed one (attempt 1, lockTimeout from the ack).
	FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *SessionFetchConfig, tags TagFilter) (*WorkItemLease, error)
	// AckWorkItem deletes the locked item and, when completion is non-nil
	// (ActivityCompleted or ActivityFailed), enqueues it for the
	// orchestrator in the same transaction. ErrInvalidLockToken when the
	// item is gone (cancelled, deleted, already acked) or its lock expired.
	// It returns only after that transaction is committed; concurrent
	// acks may share one transaction (group commit), each checked against
	// its own token and given its own result. An ack whose ctx ends before
	// it is taken into a commit returns the context's error and is not
	// applied.
	AckWorkItem(ctx context.Context, lockToken string, completion WorkItem) error
	// RenewWorkItemLock extends a live item lock to now+extendFor.
	// ErrInvalidLockToken when the item is gone or its lock expired: that
	// is how a worker learns its activity was cancelled.
	RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error
	// AbandonWorkItem unlocks the item, visible again after delay (0 =
	// now); ignoreAttempt undoes the fetch's increment (never below 0).
	// ErrInvalidLockToken if no item holds the token.
	AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error
	// RenewSessionLock extends the live, non-idle session leases of the
	// owners to now+extendFor and returns how many were renewed. A session
	// with no activity for idleTimeout is not renewed and lapses.
	RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error)
	// CleanupOrphanedSessions deletes sessions with no queued items (locked
	// or not) whose lease expired or, for idleTimeout > 0, that saw no
	// activity for idleTimeout, and returns how many were deleted.
	// idleTimeout 0 deletes expired sessions only; negative is ErrInvalidInput.
	CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error)
	// GetCustomStatus returns the instance's custom status if its version
	// is greater than lastSeenVersion, else nil (also for unknown instances).
	GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*CustomStatus, error)

	// GetKVValue returns the value of key in the instance's key-value
	// store as the current execution sees it (its own writes win, a key it
	// cleared is absent), or nil if the key (or the instance) has none.
	GetKVValue(ctx context.Context, instance, key string) (*string, error)
	// GetKVAllValues returns every key of the instance's key-value store as
	// GetKVValue sees it (empty, never nil, for none or an unknown instance).
	GetKVAllValues(ctx context.Context, instance string) (map[string]string, error)
	// GetInstanceStats returns the storage figures of the instance (see
	// SystemStats), or nil for an unknown instance (no instance row).
	// ErrCorruptRow if the current execution's OrchestrationStarted event
	// cannot be decoded.
	GetInstanceStats(ctx context.Context, instance string) (*SystemStats, error)

	// Admin returns the management interface (nil if unsupported).
	Admin() ProviderAdmin
}

// ProviderAdmin is the management surface of a Provider (duroxide's
// ProviderAdmin). Errors are *ProviderError as for Provider; unknown
// instances or executions match ErrNotFound where documented.
type ProviderAdmin interface {
	// ListInstances returns every instance id, newest first.
	ListInstances(ctx context.Context) ([]string, error)
	// ListInstancesByStatus returns the ids of instances whose current
	// execution has status, most recently started first: by the current
	// execution's (started_at, instance_id), descending (for an instance
	// that never continued as new, its creation).
	ListInstancesByStatus(ctx context.Context, status string) ([]string, error)
	// ListExecutions returns the instance's execution ids ascending (empty if unknown).
	ListExecutions(ctx context.Context, instance string) ([]uint64, error)
	// ListInstancesPage is ListInstances one page at a time (see
	// repo.PageParams): newest first by (created_at, instance_id), each
	// page one range of the created_at index after the cursor, at most
	// p.Limit ids and the cursor of the next page ("" after the last).
	// A bad limit or cursor is ErrInvalidInput.
	ListInstancesPage(ctx context.Context, p repo.PageParams) ([]string, string, error)
	// ListInstancesByStatusPage is ListInstancesByStatus one page at a
	// time, in its order (each page one range of the executions'
	// (status, started_at, instance_id) index after the cursor), with the
	// cursors' rules of ListInstancesPage (a cursor of ListInstancesPage
	// is refused).
	ListInstancesByStatusPage(ctx context.Context, status string, p repo.PageParams) ([]string, string, error)
	// ListExecutionsPage is ListExecutions one page at a time: execution
	// ids ascending, each page one range of the primary key, at most
	// p.Limit ids and the cursor of the next page ("" after the last). An
	// unknown instance gives an empty page.
	ListExecutionsPage(ctx context.Context, instance string, p repo.PageParams) ([]uint64, string, error)
	// ReadHistoryWithExecutionID returns one execution's history; ErrCorruptRow on undecodable rows.
	// It is unbounded; ProviderAdminExt.ReadHistoryPage is the paged form.
	ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]Event, error)
	// ReadHistory returns the current execution's history. ErrNotFound for an unknown instance.
	// Unbounded like ReadHistoryWithExecutionID.
	ReadHistory(ctx context.Context, instance string) ([]Event, error)
	// LatestExecutionID returns the current execution id. ErrNotFound for an unknown instance.
	LatestExecutionID(ctx context.Context, instance string) (uint64, error)
	// GetInstanceInfo describes the instance. ErrNotFound if unknown.
	GetInstanceInfo(ctx context.Context, instance string) (*InstanceInfo, error)
	// GetExecutionInfo describes one execution. ErrNotFound if unknown.
	GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (*ExecutionInfo, error)
	// GetSystemMetrics counts instances, executions and events exactly.
	// Its cost grows with the data: it reads every row (or every entry of
	// an index) of the instances, executions and history tables, and every
	// execution with status Running, Completed or Failed joined to its
	// instance; measured at 1e6 rows per table, 0.5 s on SQLite and 0.9 s
	// on PostgreSQL, 10x per 10x rows. For a dashboard or a health check
	// use ProviderAdminExt.GetSystemMetricsEstimate, whose cost is bounded.
	GetSystemMetrics(ctx context.Context) (*SystemMetrics, error)
	// GetQueueDepths counts visible, unlocked messages per queue exactly:
	// it reads every visible message of the orchestrator queue (the range
	// of its visible_at index up to now) and every row of the worker queue
	// (no visible_at index), so its cost grows with the queues' backlog.
	// ProviderAdminExt.GetQueueDepthsEstimate is the bounded form.
	GetQueueDepths(ctx context.Context) (*QueueDepths, error)
	// ListChildren returns the instance's direct children, oldest first (empty if unknown).
	// It is unbounded; ProviderAdminExt.ListChildrenPage is the paged form.
	ListChildren(ctx context.Context, instance string) ([]string, error)
	// GetParentID returns the parent instance id, "" for a root.
	// ErrNotFound if the instance is unknown.
	GetParentID(ctx context.Context, instance string) (string, error)
	// GetInstanceTree returns the instance and all its descendants (the
	// instance alone if it is unknown or has none): the instance first,
	// then breadth first, each instance's children oldest first. One
	// query, whatever the size or depth of the tree.
	GetInstanceTree(ctx context.Context, instance string) (*InstanceTree, error)
	// DeleteInstancesAtomic deletes the instances with their executions,
	// history, queue messages, locks and key-value store (both tables) in one
	// transaction, and the activity sessions their queued worker items used
	// unless another queued item needs them (unknown ids are ignored). Without force, ErrInstanceRunning if any has a Running
	// current execution; ErrOrphan if a child of a listed instance is not
	// listed. On error nothing is deleted. Deleting an instance invalidates
	// its lock tokens.
	DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (DeleteInstanceResult, error)
	// DeleteInstance deletes a root instance and its whole tree.
	// ErrNotFound if unknown, ErrSubOrchestration if it has a parent (even
	// with force), ErrInstanceRunning as DeleteInstancesAtomic.
	DeleteInstance(ctx context.Context, instance string, force bool) (DeleteInstanceResult, error)
	// DeleteInstanceBulk deletes terminal root instances matching filter
	// with their trees (one transaction per tree), oldest first. Running
	// roots, sub-orchestrations and trees with a Running descendant are
	// skipped and take no places in filter.Limit, so calling it until it
	// returns 0 deletes every deletable tree.
	DeleteInstanceBulk(ctx context.Context, filter InstanceFilter) (DeleteInstanceResult, error)
	// PruneExecutions deletes old executions (and their history) of an
	// instance per opts; never the current or a Running execution, never
	// the instance's key-value store. ErrNotFound if the instance is unknown.
	PruneExecutions(ctx context.Context, instance string, opts PruneOptions) (PruneResult, error)
	// PruneExecutionsBulk prunes the instances matching filter (any status)
	// that have an execution PruneExecutions would delete, oldest first, at
	// most filter.Limit of them, one transaction per instance, and sums the
	// results (InstancesProcessed counts the pruned instances), so repeated
	// calls reach every instance. ErrInvalidInput for a negative KeepLast.
	PruneExecutionsBulk(ctx context.Context, filter InstanceFilter, opts PruneOptions) (PruneResult, error)
}

// ProviderAdminExt is agentstore's management surface beyond duroxide's
// ProviderAdmin: counts whose cost is bounded, and the paged forms of the
// admin reads that ProviderAdmin returns whole. agentstore's admin
// (Store.ProviderAdmin, Provider.Admin) implements it; Store.ProviderAdminExt
// returns it typed. Errors are as for ProviderAdmin.
type ProviderAdminExt interface {
	ProviderAdmin
	// GetSystemMetricsEstimate is GetSystemMetrics at a bounded cost: each
	// figure is counted up to opts.Cap rows (reading at most that many
	// rows or index entries per figure), exact below it. A figure that
	// reaches the cap is estimated from the database's statistics when it
	// has them, otherwise reported as at least the cap (CountAtLeast):
	//   - PostgreSQL: table totals are the planner's own estimate: the
	//     row density of the last VACUUM, ANALYZE or CREATE INDEX
	//     (pg_class.reltuples / relpages; autovacuum refreshes it after
	//     about 10-20% of the rows changed) times the table's current size
	//     in pages, so growth shows at once, while deleted rows count until
	//     a vacuum; for a table never vacuumed nor analyzed, the cumulative
	//     statistics' pg_stat_user_tables.n_live_tup (current to within
	//     about a second of each commit; 0 after pg_stat_reset or crash
	//     recovery, and then the figure is CountAtLeast). Status figures
	//     (executions with the status, see SystemMetricsEstimate): the
	//     frequency of the status in the planner's column statistics of
	//     executions.status (pg_stats, as of the last ANALYZE; autovacuum
	//     runs one after about 10% of the rows changed) times the
	//     executions estimate. A status that is not among the most common
	//     values is CountAtLeast.
	//   - SQLite: table totals from sqlite_stat1 (as of the last ANALYZE or
	//     PRAGMA optimize; none until one ran); status figures have no
	//     statistics (CountAtLeast).
	// A negative Cap is ErrInvalidInput.
	GetSystemMetricsEstimate(ctx context.Context, opts EstimateOptions) (*SystemMetricsEstimate, error)
	// GetQueueDepthsEstimate is GetQueueDepths at a bounded cost: each
	// queue's visible, unlocked messages are counted up to opts.Cap
	// (exact below it, CountAtLeast at it; queue conditions have no
	// statistics). A negative Cap is ErrInvalidInput.
	GetQueueDepthsEstimate(ctx context.Context, opts EstimateOptions) (*QueueDepthsEstimate, error)
	// ListChildrenPage is ListChildren one page at a time (see
	// repo.PageParams): the direct children oldest first by (created_at,
	// instance_id), at most p.Limit ids and the cursor of the next page
	// ("" after the last). An unknown instance gives an empty page. A bad
	// limit or a cursor of another call is ErrInvalidInput.
	ListChildrenPage(ctx context.Context, instance string, p repo.PageParams) ([]string, string, error)
	// ReadHistoryPage is ReadHistoryWithExecutionID one page at a time:
	// the events of the execution in event id order, each page one range
	// of the history primary key after the cursor, at most p.Limit events
	// and the cursor of the next page ("" after the last). An unknown
	// instance or execution gives an empty page. ErrCorruptRow if an event
	// of the page cannot be decoded (the message names the row); a bad
	// limit or a cursor of another call is ErrInvalidInput.
	ReadHistoryPage(ctx context.Context, instance string, executionID uint64, p repo.PageParams) ([]Event, string, error)
}
