package agentstore_test

import (
	"errors"
	"fmt"

	"github.com/agentstore/agentstore"
)

// TestHostileTenantIsolation moved to the conformance suite
// (agentstoretest/tenancy.go, area Tenancy); outcome stays for the root's
// reliability tests.

// outcome summarises an operation's result for comparison: whether it
// found anything and which sentinel its error matches.
func outcome(found bool, err error) string {
	switch {
	case err == nil:
		return fmt.Sprintf("ok(found=%v)", found)
	case errors.Is(err, agentstore.ErrNotFound):
		return "ErrNotFound"
	case errors.Is(err, agentstore.ErrLockLost):
		return "ErrLockLost"
	case errors.Is(err, agentstore.ErrInvalidInput):
		return "ErrInvalidInput"
	case errors.Is(err, agentstore.ErrConflict):
		return "ErrConflict"
	}
	return "error: " + err.Error()
}
