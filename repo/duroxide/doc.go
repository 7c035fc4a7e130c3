// Package duroxide is the storage contract of the duroxide durable-execution
// runtime as agentstore implements it: the Provider and ProviderAdmin
// interfaces, the wire types a runtime exchanges with the store (work
// items, history events, acks, instance and execution info) with JSON
// codecs that read and write duroxide's own JSON layout, and the provider's
// error sentinels.
//
// The session API lives in package repo; the implementation of both is the
// root package agentstore (st.Provider(), st.ProviderAdmin()). Errors follow
// agentstore's one error model (see package repo): every method returns a
// *ProviderError whose errors.Is chain carries the sentinels of package repo
// (ErrNotFound, ErrInvalidInput, ErrCorruptRow, ErrLockLost, ErrRetryable)
// and of this package (ErrInvalidLockToken, ErrInstanceRunning,
// ErrSubOrchestration, ErrOrphan, ErrDuplicateEvent).
//
// # Deviations from duroxide
//
// agentstore follows duroxide-pg 0.1.33 / duroxide 0.1.29, with the wire
// fields and provider obligations duroxide added since (parent_execution_id
// on StartOrchestration and OrchestrationStarted; parent_instance,
// parent_id and parent_execution_id on ContinueAsNew, each omitted when
// nil so root items encode exactly as in 0.1.29; history returned exactly
// as acked; leases valid for their lock timeout when a fetch returns them,
// as duroxide-pg's migration 0024 requires), except where listed here
// (each is also stated on the method it concerns):
//
//   - Errors are typed: match the sentinels with errors.Is instead of
//     message text (messages keep duroxide's wording where it has one:
//     "Invalid lock token", "is Running", "Orphan detected", "not found").
//   - The capability filter honours every range of
//     DispatcherCapabilityFilter (duroxide-pg uses only the first) and
//     compares major, minor, patch without packing (no overflow at 1000).
//   - A session-claim conflict in FetchWorkItem moves on to the next
//     eligible item instead of returning nothing.
//   - Fetches long-poll up to pollTimeout (duroxide-pg short-polls); the
//     internal retries of a long poll stop at its deadline, a short poll
//     (pollTimeout 0) keeps duroxide-pg's three retries.
//   - Lock, renew, lease and delay durations have millisecond precision,
//     rounded up (duroxide-pg truncates renewals to whole seconds).
//   - Acks consume the lock (strict single ack) and write completed_at for
//     every terminal status, ContinuedAsNew included (as duroxide's SQLite
//     provider; duroxide-pg leaves it NULL).
//   - An ack without orchestration name and version writes no execution
//     row for a true orphan batch (no instance row, no history stored or in
//     the ack, no StartOrchestration/ContinueAsNew in the batch); duroxide-pg
//     always writes one.
//   - FetchOrchestrationItem takes the instance with the oldest visible
//     message, except on PostgreSQL while n other fetches of the same
//     Store are claiming (n at most 3): it then takes the (n+1)-th
//     eligible instance, or the last when there are fewer, since the
//     first ones are likely theirs.
//   - Undecodable history is reported in OrchestrationItem.HistoryError,
//     never a failed fetch (duroxide-pg fails the fetch on non-JSON text).
//   - DeleteInstanceBulk skips a terminal root whose tree holds a Running
//     instance (duroxide-pg force-deletes such children), and its Limit
//     counts only deletable roots; PruneExecutionsBulk's Limit counts only
//     instances with something to prune, and InstancesProcessed counts
//     those (duroxide-pg: every selected instance). Repeated calls with any
//     Limit therefore reach every eligible instance.
//   - CleanupOrphanedSessions honours its idle timeout (duroxide-pg ignores
//     it), and deleting an instance deletes the activity sessions its queued
//     worker items used unless another queued item needs them (duroxide-pg
//     never deletes sessions; sessions whose items had all finished are left
//     to CleanupOrphanedSessions, as they name no instance).
//   - Key-value: a KeyValueSet with last_updated_at_ms 0 is stored with the
//     ack's clock; the limits (MaxKVKeys keys set by one ack, values of at
//     most MaxKVValueBytes) and keys and values without NUL are checked
//     before any SQL with ErrInvalidInput; the instance-wide key count is
//     the runtime's check.
package duroxide
