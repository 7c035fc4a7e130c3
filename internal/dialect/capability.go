package dialect

import "strings"

// Capability is one feature a dialect's database may have. A Store's
// capabilities are the dialect's, less those switched off with
// WithoutCapabilities; Store.Capabilities reports them. The root package
// re-exports the type and its constants (agentstore.CapRowLocks, ...).
type Capability uint32

// The capabilities repository code asks for.
const (
	// CapRowLocks: SELECT ... FOR UPDATE locks rows until commit, so
	// concurrent writers of one row queue behind each other. Without it
	// the dialect must be CapSingleWriter (one write transaction at a time
	// serialises every read-modify-write). A property of the database; it
	// cannot be switched off.
	CapRowLocks Capability = 1 << iota
	// CapSkipLocked: FOR UPDATE SKIP LOCKED, so queue claims pass over
	// rows other transactions hold instead of waiting for them. Off: claims
	// use plain FOR UPDATE (correct, but concurrent claimers queue).
	CapSkipLocked
	// CapAsyncCommit: a transaction may commit without waiting for its WAL
	// flush (PostgreSQL synchronous_commit = off, scoped to the
	// transaction). Used only for lease and lock claims, whose loss in a
	// crash is the at-least-once redelivery a lease expiry gives anyway.
	// Off: every commit is synchronous.
	CapAsyncCommit
	// CapAdvisoryLocks: transaction-scoped advisory locks
	// (pg_advisory_xact_lock). Migrate serialises concurrent callers with
	// one; the provider's one-statement orchestration fetch needs them.
	// Off: Migrate retries a run that collided with a concurrent one, and
	// the general fetch path is used.
	CapAdvisoryLocks
	// CapWakeup: a waiting fetch is woken when another Store or process
	// commits work (LISTEN/NOTIFY on PostgreSQL, a PRAGMA data_version
	// watcher on SQLite). Off: fetches see other Stores' work at their
	// fallback re-check (WithPollInterval).
	CapWakeup
	// CapSnapshotReads: read-only REPEATABLE READ transactions that do not
	// block writers, so a multi-statement read (Load, Verify) sees one
	// snapshot. Off: reads run statement by statement (SQLite: a read
	// transaction would take the write lock).
	CapSnapshotReads
	// CapValidatedJSON: the database validates JSON columns on write
	// (jsonb), so reads need not validate stored message content again.
	// Off: every read validates it.
	CapValidatedJSON
	// CapPartialIndexes: CREATE INDEX ... WHERE. The models' queue indexes
	// are partial; a property of the dialect's DDL that cannot be switched
	// off.
	CapPartialIndexes
	// CapSingleWriter: the database admits one write transaction at a
	// time (SQLite). Writes of a Store go through one write connection
	// (Open) or a per-Store mutex (New). A property of the database; it
	// cannot be switched off.
	CapSingleWriter
	// CapAlterColumns: ALTER TABLE can change a column's type, nullability
	// and constraints in place. Off (SQLite): Verify's fixes rebuild the
	// table. A property of the database.
	CapAlterColumns
	// CapFastPaths: the dialect's optional one-statement implementations
	// of hot steps (PostgreSQL: append's lock-and-advance, the
	// orchestration fetch and ack, the worker ack) and the worker fetch's
	// single-node claim (FOR UPDATE SKIP LOCKED over the queue) are used.
	// Off: the general transaction paths, which every dialect has (and,
	// switched off on a dialect that has it, the worker fetch's claims per
	// shard key, docs/distributed.md). The conformance suite runs on
	// PostgreSQL both ways.
	CapFastPaths
	// CapGroupCommit: concurrent SessionQueue.Dequeue, SessionQueue.Complete
	// and Provider.AckWorkItem calls of one Store are coalesced: the
	// Dequeues of one session into one claim statement (each call leased
	// its own item, with its own token, owner and lease end), the
	// Completes and acks into one statement or transaction (one commit,
	// one WAL flush), each item checked on its own and each caller told
	// its own outcome after the commit (see groupcommit.go); so are
	// concurrent Sessions.AppendMessages(With) calls on the transaction path
	// (one write transaction, the appends applied one after the other, each
	// with the outcome it would get alone). Batches form only while an earlier
	// flush of the same kind runs, or from calls that arrive while a new
	// leader yields the processor once (no timer); a call alone runs at once
	// after that yield. Off: every call runs its own statement and commit.
	// Both dialects have it: on SQLite concurrent commits queue for the one
	// writer anyway; on PostgreSQL one claim and one completion statement for
	// several items cost the server a fraction of one per item
	// (BENCHMARKS.md).
	CapGroupCommit
	// CapUpdateReturning: UPDATE ... RETURNING (PostgreSQL, SQLite). Off
	// (MariaDB, MySQL): the engine's general form, the UPDATE and then a
	// SELECT of the updated rows by key (or by the new lease token) in the
	// same transaction, whose row locks keep the rows as written. A
	// property of the database's SQL.
	CapUpdateReturning
	// CapLockOf: SELECT ... FOR UPDATE OF alias (PostgreSQL; MySQL 8).
	// Off (MariaDB): the claim selects lock with a plain FOR UPDATE, which
	// locks the rows of every table the SELECT reads; the engine's claim
	// selects read one table, so the locks are the same. A property of the
	// database's SQL.
	CapLockOf
	// CapMaterializedCTE: WITH name AS MATERIALIZED (...) (PostgreSQL,
	// SQLite), which fixes a CTE the orchestration fetch's walk reads three
	// times as computed once. Off (MariaDB, which has no such keyword and
	// materialises a CTE read more than once by itself): plain AS. A
	// property of the database's SQL.
	CapMaterializedCTE
	// CapChangeFeed: the dialect's chain records session changes (V10's
	// triggers; V14's on MariaDB), so Sessions' ChangeFeed reads them. Off
	// (a dialect whose chain has the table but no triggers): ChangeFeed's
	// calls fail with ErrInvalidConfig instead of reading an empty feed. A
	// property of the dialect's schema.
	CapChangeFeed
)

// CapabilityInfo names one capability.
type CapabilityInfo struct {
	// Cap is the capability's bit.
	Cap Capability
	// Name is its name in reports ("row_locks").
	Name string
	// Fixed capabilities describe the database itself; switching them off
	// would make agentstore wrong, not slower.
	Fixed bool
}

// Capabilities lists every capability, in bit order.
func Capabilities() []CapabilityInfo {
	return []CapabilityInfo{
		{CapRowLocks, "row_locks", true},
		{CapSkipLocked, "skip_locked", false},
		{CapAsyncCommit, "async_commit", false},
		{CapAdvisoryLocks, "advisory_locks", false},
		{CapWakeup, "wakeup", false},
		{CapSnapshotReads, "snapshot_reads", false},
		{CapValidatedJSON, "validated_json", false},
		{CapPartialIndexes, "partial_indexes", true},
		{CapSingleWriter, "single_writer", true},
		{CapAlterColumns, "alter_columns", true},
		{CapFastPaths, "fast_paths", false},
		{CapGroupCommit, "group_commit", false},
		{CapUpdateReturning, "update_returning", true},
		{CapLockOf, "lock_of", true},
		{CapMaterializedCTE, "materialized_cte", true},
		{CapChangeFeed, "change_feed", true},
	}
}

// AllCapabilities is the union of every defined capability.
func AllCapabilities() Capability {
	var all Capability
	for _, n := range Capabilities() {
		all |= n.Cap
	}
	return all
}

// Has reports whether every capability in x is in c.
func (c Capability) Has(x Capability) bool { return c&x == x }

// String lists the capabilities in c, e.g. "row_locks|skip_locked".
func (c Capability) String() string {
	var parts []string
	for _, n := range Capabilities() {
		if c&n.Cap != 0 {
			parts = append(parts, n.Name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}
