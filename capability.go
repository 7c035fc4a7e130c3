package agentstore

import "github.com/agentstore/agentstore/internal/engine"

// Capability is one feature a dialect's database may have. A Store's
// capabilities are the dialect's, less those switched off with
// WithoutCapabilities; Store.Capabilities reports them.
type Capability = engine.Capability

// The capabilities repository code asks for.
const (
	// CapRowLocks: SELECT ... FOR UPDATE locks rows until commit, so
	// concurrent writers of one row queue behind each other. Without it
	// the dialect must be CapSingleWriter (one write transaction at a time
	// serialises every read-modify-write). A property of the database; it
	// cannot be switched off.
	CapRowLocks = engine.CapRowLocks
	// CapSkipLocked: FOR UPDATE SKIP LOCKED, so queue claims pass over
	// rows other transactions hold instead of waiting for them. Off: claims
	// use plain FOR UPDATE (correct, but concurrent claimers queue).
	CapSkipLocked = engine.CapSkipLocked
	// CapAsyncCommit: a transaction may commit without waiting for its WAL
	// flush (PostgreSQL synchronous_commit = off, scoped to the
	// transaction). Used only for lease and lock claims, whose loss in a
	// crash is the at-least-once redelivery a lease expiry gives anyway.
	// Off: every commit is synchronous.
	CapAsyncCommit = engine.CapAsyncCommit
	// CapAdvisoryLocks: transaction-scoped advisory locks
	// (pg_advisory_xact_lock). Migrate serialises concurrent callers with
	// one; the provider's one-statement orchestration fetch needs them.
	// Off: Migrate retries a run that collided with a concurrent one, and
	// the general fetch path is used.
	CapAdvisoryLocks = engine.CapAdvisoryLocks
	// CapWakeup: a waiting fetch is woken when another Store or process
	// commits work (LISTEN/NOTIFY on PostgreSQL, a PRAGMA data_version
	// watcher on SQLite). Off: fetches see other Stores' work at their
	// fallback re-check (WithPollInterval).
	CapWakeup = engine.CapWakeup
	// CapSnapshotReads: read-only REPEATABLE READ transactions that do not
	// block writers, so a multi-statement read (Load, Verify) sees one
	// snapshot. Off: reads run statement by statement (SQLite: a read
	// transaction would take the write lock).
	CapSnapshotReads = engine.CapSnapshotReads
	// CapValidatedJSON: the database validates JSON columns on write
	// (jsonb), so reads need not validate stored message content again.
	// Off: every read validates it.
	CapValidatedJSON = engine.CapValidatedJSON
	// CapPartialIndexes: CREATE INDEX ... WHERE. The models' queue indexes
	// are partial; a property of the dialect's DDL that cannot be switched
	// off.
	CapPartialIndexes = engine.CapPartialIndexes
	// CapSingleWriter: the database admits one write transaction at a
	// time (SQLite). Writes of a Store go through one write connection
	// (Open) or a per-Store mutex (New). A property of the database; it
	// cannot be switched off.
	CapSingleWriter = engine.CapSingleWriter
	// CapAlterColumns: ALTER TABLE can change a column's type, nullability
	// and constraints in place. Off (SQLite): Verify's fixes rebuild the
	// table. A property of the database.
	CapAlterColumns = engine.CapAlterColumns
	// CapFastPaths: the dialect's optional one-statement implementations
	// of hot steps (PostgreSQL: append's lock-and-advance, the
	// orchestration fetch and ack, the worker ack) are used. Off: the
	// general transaction paths, which every dialect has. The conformance
	// suite runs on PostgreSQL both ways.
	CapFastPaths = engine.CapFastPaths
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
	CapGroupCommit = engine.CapGroupCommit
	// CapUpdateReturning: UPDATE ... RETURNING (PostgreSQL, SQLite). Off
	// (MariaDB): the UPDATE and then a SELECT of the updated rows in the same
	// transaction. Describes the database.
	CapUpdateReturning = engine.CapUpdateReturning
	// CapLockOf: SELECT ... FOR UPDATE OF alias (PostgreSQL). Off (MariaDB):
	// a plain FOR UPDATE on claim selects that read one table. Describes the
	// database.
	CapLockOf = engine.CapLockOf
	// CapMaterializedCTE: WITH name AS MATERIALIZED (PostgreSQL, SQLite).
	// Off (MariaDB): plain AS. Describes the database.
	CapMaterializedCTE = engine.CapMaterializedCTE
	// CapChangeFeed: the schema records session changes (PostgreSQL,
	// SQLite). Off (MariaDB): ChangeFeed's calls fail with
	// ErrInvalidConfig. Describes the dialect's schema.
	CapChangeFeed = engine.CapChangeFeed
)

// WithoutCapabilities switches capabilities of the dialect off, for a
// database that speaks a dialect's protocol but lacks a feature (a
// PostgreSQL-wire database without LISTEN/NOTIFY or advisory locks), for a
// pooler that cannot carry one (WithoutCapabilities(CapWakeup) behind a
// transaction pooler), or to run the general code paths
// (WithoutCapabilities(CapFastPaths)). CapRowLocks, CapSingleWriter,
// CapPartialIndexes and CapAlterColumns describe the database itself and
// are refused with ErrInvalidConfig. Switching off a capability the dialect
// does not have is allowed and changes nothing.
func WithoutCapabilities(caps ...Capability) Option {
	return engine.WithoutCapabilities(caps...)
}

// Capabilities returns the capabilities in force: the dialect's, less those
// switched off with WithoutCapabilities.
func (s *Store) Capabilities() Capability {
	return s.e.Capabilities()
}
