package dialect

import (
	"context"
	"errors"

	"github.com/agentstore/agentstore/repo"
)

// Open's failures in the Store's own words: which database could not be
// reached (the DSN redacted, or the SQLite path), why, and a sentinel
// telling a configuration mistake (ErrInvalidConfig: retrying cannot help)
// from a transient failure (ErrRetryable). The driver's error stays in the
// chain for errors.As, its text out of the message.

// OpenFailureDescriber is implemented by dialects that can say why Open
// could not use their database.
type OpenFailureDescriber interface {
	// DescribeOpenFailure returns what Open tried ("connect to <redacted
	// DSN>", "open SQLite database <path>"), the reason in a few words,
	// and ErrInvalidConfig or ErrRetryable (or another sentinel).
	DescribeOpenFailure(dsn, target string, cfg *Config, err error) (subject, reason string, kind error)
}

// OpenError is the error of an Open that could not use its database: What
// it tried ("connect to postgres://app:xxxxx@db:5432/agents", "open SQLite
// database ./data/agents.db"), the Reason in the Store's words ("connection
// refused", "database \"agents\" does not exist", "directory ./data does
// not exist"). It matches ErrInvalidConfig when the configuration is wrong
// (unknown database, role or path, authentication, TLS certificate:
// retrying cannot help) or ErrRetryable when the failure is transient
// (server down or unreachable, starting up, out of connection slots,
// connect timeout); after the caller's own context ended it matches that
// context error instead (not retryable). The driver's error is reachable
// with errors.As (no secret of the DSN in its message); its text is not in
// Error.
type OpenError struct {
	What   string
	Reason string
	kind   error
	cause  error
}

// Error returns "agentstore: cannot <What>: <Reason>".
func (e *OpenError) Error() string { return "agentstore: cannot " + e.What + ": " + e.Reason }

// Unwrap returns the sentinel and the driver's error.
func (e *OpenError) Unwrap() []error {
	out := make([]error, 0, 2)
	if e.kind != nil {
		out = append(out, e.kind)
	}
	if e.cause != nil {
		out = append(out, e.cause)
	}
	return out
}

// OpenFailure explains err, the failure of Open's first use of dsn.
func OpenFailure(ctx context.Context, d Dialect, dsn, target string, cfg *Config, err error) error {
	cause := Scrub(err, dsn)
	subject, reason, kind := "connect to "+RedactDSN(dsn), "the connection failed", error(repo.ErrRetryable)
	if od, ok := d.(OpenFailureDescriber); ok {
		subject, reason, kind = od.DescribeOpenFailure(dsn, target, cfg, err)
	}
	switch {
	case errors.Is(err, repo.ErrStatementTimeout):
		// the Store's own statement timeout (WithStatementTimeout) ended
		// one of Open's statements: not a problem of the file or server
		reason, kind = "a statement of Open ran past the statement timeout (WithStatementTimeout)", repo.ErrStatementTimeout
	case errors.Is(err, repo.ErrLockTimeout):
		reason, kind = "a statement of Open waited past the lock timeout (WithLockTimeout)", repo.ErrLockTimeout
	}
	if cerr := ctx.Err(); cerr != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		// The caller's own deadline or cancellation, not the server's.
		reason, kind = "the caller's context ended first ("+cerr.Error()+")", cerr
	}
	return &OpenError{What: subject, Reason: reason, kind: kind, cause: cause}
}

// ConfigError is an ErrInvalidConfig whose message is the Store's and
// whose cause (a driver's error, secrets scrubbed) stays in the chain.
type ConfigError struct {
	// Msg is the message after "agentstore: invalid configuration: ".
	Msg string
	// Cause is the driver's error (nil for none).
	Cause error
}

// Error returns the sentinel's text and Msg.
func (e *ConfigError) Error() string { return ErrInvalidConfig.Error() + ": " + e.Msg }

// Unwrap returns ErrInvalidConfig and the cause.
func (e *ConfigError) Unwrap() []error {
	if e.Cause == nil {
		return []error{ErrInvalidConfig}
	}
	return []error{ErrInvalidConfig, e.Cause}
}
