package duroxide

import (
	"errors"

	"github.com/agentstore/agentstore/repo"
)

// providerSentinel is a sentinel error that also matches a more general one.
type providerSentinel struct {
	msg    string
	parent error
}

func (e *providerSentinel) Error() string { return e.msg }

// Unwrap returns the more general sentinel (or nil).
func (e *providerSentinel) Unwrap() error { return e.parent }

// Sentinels of the orchestration provider contract. Match them with errors.Is.
var (
	// ErrInvalidLockToken: the lock token is unknown, expired, already used
	// by an ack, or was removed (cancelled activity, deleted instance). It
	// also matches ErrLockLost. Permanent.
	ErrInvalidLockToken error = &providerSentinel{msg: "agentstore: invalid lock token", parent: repo.ErrLockLost}
	// ErrInstanceRunning: a non-forced delete named an instance whose
	// current execution is Running. Permanent; nothing was deleted.
	ErrInstanceRunning = errors.New("agentstore: instance is Running")
	// ErrSubOrchestration: DeleteInstance was asked to delete a
	// sub-orchestration directly; delete its root instead. Permanent.
	ErrSubOrchestration = errors.New("agentstore: cannot delete a sub-orchestration directly")
	// ErrOrphan: an atomic delete would leave a child instance whose parent
	// is deleted (orphan). Permanent; nothing was deleted.
	ErrOrphan = errors.New("agentstore: delete would orphan a child instance")
	// ErrDuplicateEvent: an ack carried a history event whose id already
	// exists in the execution. The whole ack was rolled back and the lock is
	// still held. Permanent.
	ErrDuplicateEvent = errors.New("agentstore: duplicate history event")
)

// ProviderError is the error type of every Provider and ProviderAdmin
// method: agentstore's one error type of both domains, repo.Error (the
// operation, a message, whether retrying may succeed, the cause). Unwrap
// exposes Err (which carries the sentinels: ErrInvalidLockToken,
// ErrNotFound, ...) and, when Retryable, ErrRetryable.
type ProviderError = repo.Error

// IsRetryableProviderError reports whether err is a retryable *ProviderError
// (or otherwise matches ErrRetryable).
func IsRetryableProviderError(err error) bool {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return pe.Retryable
	}
	return errors.Is(err, repo.ErrRetryable)
}

// ToInfrastructureError converts a provider failure to the ErrorDetails a
// runtime records when it ends an activity or orchestration: the
// operation, message and retryability of its *ProviderError, or (for any
// other error) operation "unknown" with the error's text.
func ToInfrastructureError(err error) ErrorDetails {
	var pe *ProviderError
	if errors.As(err, &pe) {
		return ErrorDetails{Infrastructure: &InfrastructureError{Operation: pe.Op, Message: pe.Message, Retryable: pe.Retryable}}
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	return ErrorDetails{Infrastructure: &InfrastructureError{Operation: "unknown", Message: msg, Retryable: errors.Is(err, repo.ErrRetryable)}}
}
