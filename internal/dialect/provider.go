package dialect

import "github.com/agentstore/agentstore/models"

// Optional one-statement forms of provider steps. The engine runs one
// control flow per behaviour (validation, loops, error mapping); where a
// dialect implements one of these interfaces and the Store has
// CapFastPaths, a step of that flow is the dialect's single statement
// (one round trip, its own autocommit transaction) instead of the
// portable sequence of statements in a transaction. Both must have the
// same effect; the conformance suite runs PostgreSQL both ways.

// OrchClaim describes one candidate step of an orchestration fetch for
// OrchFetchStatement.
type OrchClaim struct {
	// Quote returns the quoted, schema-qualified name of the table with
	// base name base (models.Table*).
	Quote func(base string) string
	// Candidate is the query naming the candidate instance (one
	// instance_id column, at most one row; a row with a NULL instance_id
	// means "this level cannot decide"); CandidateArgs are its
	// arguments. It takes no row locks.
	Candidate     string
	CandidateArgs []any
	// Schema and Prefix are the Store's (WithSchema, WithTablePrefix):
	// with the instance id they key the per-instance serialisation.
	Schema, Prefix string
	// Token is the lock token of the claim, Until its lock end and Now
	// the claim's clock (Unix ms).
	Token      string
	Until, Now int64
	// WaitMS bounds every row-lock wait of the statement (a longer wait
	// fails it with ErrLockTimeout); Async makes its commit asynchronous.
	WaitMS int64
	Async  bool
}

// Kinds of the rows an OrchFetchStatement returns (column kind).
const (
	// OrchRowHead is the first row: instance_id (NULL: the candidate
	// level cannot decide), got (the instance's serialisation was
	// obtained), locked (the instance lock row was taken), fresh (the
	// instance row below and the history and key-value rows were read
	// after the lock; with no instance row: the instance has no instance
	// row, history or key-value rows after the lock either), and the
	// instance row's orchestration_name, orchestration_version,
	// current_execution_id (NULL: no row).
	OrchRowHead = 0
	// OrchRowMessage is a claimed message: id, data = work_item,
	// attempt_count.
	OrchRowMessage = 1
	// OrchRowHistory is an event of the current execution: id =
	// event_id, data = event_data (only when fresh).
	OrchRowHistory = 2
	// OrchRowKV is a kv_store entry: kv_key, data = value, id =
	// last_updated_at_ms (only when fresh).
	OrchRowKV = 3
)

// OrchFetchStatement is implemented by a dialect that claims an
// orchestration item in one statement per candidate (used with
// CapFastPaths and CapAdvisoryLocks). The engine's portable sequence does
// the same in its fetch transaction: the candidate query, the instance
// lock row (taken unless a live one exists), the claim of every visible,
// unclaimed message of the instance, then the metadata read.
type OrchFetchStatement interface {
	// OrchClaimSQL returns the statement of claim c and its arguments.
	// It picks the candidate, serialises on the instance without waiting
	// for another fetcher (busy: got false), takes the instance lock row
	// with c.Token until c.Until unless a live one exists (locked), claims
	// the instance's visible messages not claimed by a live lock (rows
	// another transaction holds are skipped), counting an attempt on each,
	// and reads the instance row, the current execution's history and
	// kv_store. Rows: columns kind, instance_id, got, locked, fresh,
	// orchestration_name, orchestration_version, current_execution_id,
	// id, data, attempt_count, kv_key (see OrchRow*), ordered by kind, id;
	// no row when there is no candidate.
	OrchClaimSQL(c *OrchClaim) (string, []any)
}

// KVRow is the net effect of an ack on one key: a value (set) or nil
// (tombstone), and its timestamp (Unix ms).
type KVRow struct {
	Key   string
	Value *string
	TS    int64
}

// ActivityRef names an activity of an execution.
type ActivityRef struct {
	Instance            string
	Execution, Activity int64
}

// OrchAck is an orchestration ack for OrchAckStatement, validated and
// encoded by the engine.
type OrchAck struct {
	// Quote returns the quoted, schema-qualified name of a table (see
	// OrchClaim).
	Quote func(base string) string
	// LockToken is the fetch's token (as stored in lock_token); Now the
	// ack's clock (Unix ms); Exec the execution acked.
	LockToken string
	// Instance, when not empty, is the instance the lease token names:
	// the statements on the lock token also pin instance_id to it, so the
	// ack is routed by the distribution column (docs/distributed.md).
	Instance  string
	Now, Exec int64
	// Name and Version, when both set, upsert the instance row (with
	// Parent, kept once set); otherwise the existing row's
	// current_execution_id is raised to Exec. current_execution_id never
	// decreases; updated_at is Now.
	Name, Version, Parent *string
	// CustomStatus, when SetCustomStatus, is written to the instance row
	// with one bump of custom_status_version.
	CustomStatus    *string
	SetCustomStatus bool
	// The execution row (instance, Exec): inserted with ExecStatus,
	// ExecOutput, started_at Now, ExecCompleted and the pinned version
	// VerMajor/VerMinor/VerPatch; on conflict ExecConflict (an ON
	// CONFLICT action, " DO NOTHING" or " DO UPDATE SET ..."). Without
	// History it is written only when the instance row exists or
	// Started(instance) has a row.
	ExecStatus                                  string
	ExecOutput                                  *string
	ExecCompleted, VerMajor, VerMinor, VerPatch *int64
	ExecConflict                                string
	// Started returns a query that has a row when the locked batch starts
	// an execution or the instance (the SQL expression instance) has
	// stored history; its parameters are the lock token, then, when
	// instance is "?", the instance twice.
	Started func(instance string) string
	// History is appended (a stored event id fails the statement with
	// ErrConflict); only ExecutionID, EventID, EventType, EventData are set.
	History []models.HistoryEvent
	// KV is the ack's key-value writes: without KVTerminal, KVRows go to
	// kv_delta (KVClearAll first tombstones every other key stored or in
	// the delta); with KVTerminal, kv_delta overlaid with them is merged
	// into kv_store (tombstones delete) and emptied. Nothing when
	// !KVTerminal and there are no rows and no KVClearAll.
	KVRows                 []KVRow
	KVClearAll, KVTerminal bool
	// Worker and Orch are enqueued; Cancelled worker items are deleted
	// (Worker holds none of them). A Worker row with a LockToken is
	// enqueued leased (its LockToken, LockedUntil and AttemptCount
	// stored as given), for an in-process hand-over to a waiting fetch.
	Worker    []models.WorkerQueueItem
	Cancelled []ActivityRef
	Orch      []models.OrchestratorQueueItem
}

// OrchAckStatement is implemented by a dialect that acks an orchestration
// item in one statement (used with CapFastPaths).
type OrchAckStatement interface {
	// OrchAckSQL returns the statement of ack a and its arguments: it
	// deletes the instance lock row of a.LockToken if its lock holds at
	// a.Now and, only then, does every write of the ack and deletes the
	// messages claimed with the token; it returns the instance_id of the
	// deleted lock row (no row: nothing was written). When a Worker row
	// has a LockToken, every row has four columns: first the instance row
	// (0, instance_id, NULL, NULL), then one row (1, NULL, id, lock_token)
	// per such worker row enqueued. ok is false when the
	// ack does not fit in one statement (the portable transaction runs).
	OrchAckSQL(a *OrchAck) (q string, args []any, ok bool)
}

// WorkerAckStatement is implemented by a dialect that acks worker items
// in one statement (used with CapFastPaths), one or a group-commit batch.
type WorkerAckStatement interface {
	// WorkerAckSQL returns the statement acking n worker items; quote
	// names tables (see OrchClaim). Its parameters are seven per item:
	// index k (integer), row id (bigint), stored token (text), the item's
	// clock (bigint, Unix ms), the completion's instance id and work item
	// (text, both NULL for none), and the row's instance id the lease token
	// names (text, NULL for a token that names none; when set the row must
	// have it: the routing key). For each item whose row has that token
	// and a lock that holds at its clock, it deletes the row,
	// touches the row's activity session (last_activity_at = clock, when
	// the session's lease holds at it) and enqueues the completion
	// (visible and created at the clock), completions in index order; the
	// rows returned (column k) are the indexes of the acked items. The
	// items' row ids are distinct.
	WorkerAckSQL(n int, quote func(base string) string) string
}

// Upserter is implemented by a dialect whose database has no INSERT ...
// ON CONFLICT ... DO UPDATE ... WHERE (MariaDB, MySQL: ON DUPLICATE KEY
// UPDATE, which has no WHERE). The engine's guarded upserts (a todo or plan
// id stored under another session is left alone) then assign every column
// through GuardedAssign and check the guard with a read after the write.
type Upserter interface {
	// GuardedAssign returns the value expression of column col in the
	// upsert's update list: the inserted row's value when the stored row's
	// column guard equals the inserted row's, else the stored value. The
	// guard column itself is never assigned.
	GuardedAssign(col, guard string) string
	// KeepExisting returns the clause after an INSERT that keeps a row
	// whose unique key exists as it is, in place of ON CONFLICT (key) DO
	// NOTHING; col is a column of that key. Its RETURNING list may then
	// return the existing row (MariaDB does), which the engine tells apart
	// by the new row's own id.
	KeepExisting(col string) string
	// RewriteUpsert rewrites one of the engine's unguarded upserts
	// (INSERT [INTO t AS alias] ... ON CONFLICT (key) DO NOTHING or DO
	// UPDATE SET c = excluded.c, ..., without WHERE) into the database's
	// form. The engine's guarded upserts (ON CONFLICT ... WHERE, whose
	// rows-affected count tells who won) take a general form instead: the
	// stored row read FOR UPDATE, then an INSERT or a guarded UPDATE.
	RewriteUpsert(stmt string) string
}
