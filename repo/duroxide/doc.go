// Package duroxide is the storage contract of the duroxide durable-execution
// runtime as agentstore implements it: the Provider and ProviderAdmin
// interfaces, the wire types a runtime exchanges with the store (work
// items, history events, acks, instance and execution info) with their
// serde-compatible JSON codecs, and the provider's error sentinels.
//
// The session API lives in package repo; the implementation of both is the
// root package agentstore (st.Provider(), st.ProviderAdmin()). Errors follow
// agentstore's one error model (see package repo): every method returns a
// *ProviderError whose errors.Is chain carries the sentinels of package repo
// (ErrNotFound, ErrInvalidInput, ErrCorruptRow, ErrLockLost, ErrRetryable)
// and of this package (ErrInvalidLockToken, ErrInstanceRunning,
// ErrSubOrchestration, ErrOrphan, ErrDuplicateEvent).
package duroxide
