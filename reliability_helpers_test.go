package agentstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Reliability tests print their figures on lines starting with relPrefix so
// RELIABILITY.md can be refreshed with
//
//	go test -race -count=1 -run 'TestReliability|TestHostile|TestFuzz' -v . | grep RELIABILITY:
const relPrefix = "RELIABILITY: "

// relScaleEnv scales the load tests: 1 = the sizes of issue 6 (20,000 items
// per queue, 500 orchestrations, 16 x 100 appends). Smaller values shrink every
// load test proportionally (with a floor), larger values make a soak run.
const relScaleEnv = "AGENTSTORE_RELIABILITY_SCALE"

// relDefaultScale is the scale used when relScaleEnv is unset. It keeps the
// whole CI run (-race, 2 shared cores) well under 20 minutes; see
// RELIABILITY.md for the figures of the full-size run.
const relDefaultScale = 0.1

// relScale returns the load scale factor.
func relScale(t testing.TB) float64 {
	t.Helper()
	v := os.Getenv(relScaleEnv)
	if v == "" {
		return relDefaultScale
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f <= 0 {
		t.Fatalf("%s=%q: want a positive number", relScaleEnv, v)
	}
	return f
}

// scaled returns full*scale, at least floor.
func scaled(t testing.TB, full, floor int) int {
	t.Helper()
	return max(floor, int(float64(full)*relScale(t)))
}

// relLogf prints one figure line for RELIABILITY.md.
func relLogf(t testing.TB, format string, args ...any) {
	t.Helper()
	t.Logf(relPrefix+"%s: "+format, append([]any{t.Name()}, args...)...)
}

// isRetryable reports whether err is transient: the session store's
// ErrRetryable or a retryable *duroxide.ProviderError.
func isRetryable(err error) bool {
	if errors.Is(err, agentstore.ErrRetryable) {
		return true
	}
	var pe *duroxide.ProviderError
	return errors.As(err, &pe) && pe.Retryable
}

// retryCounter retries an operation while it fails retryably, counting the
// retries, until ctx ends.
type retryCounter struct{ n int64 }

// do runs fn until it succeeds or fails permanently. Retryable errors are
// counted and retried after a short pause.
func (r *retryCounter) do(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil || !isRetryable(err) {
			return err
		}
		r.n++
		if ctx.Err() != nil {
			return fmt.Errorf("gave up after %d retries: %w", r.n, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// tableCount counts the rows of table base matching where (may be "").
func tableCount(t testing.TB, st *agentstore.Store, base, where string, args ...any) int64 {
	t.Helper()
	var n int64
	q := st.DB(context.Background()).Table(st.Table(base))
	if where != "" {
		q = q.Where(where, args...)
	}
	if err := q.Count(&n).Error; err != nil {
		t.Fatalf("count %s where %q: %v", base, where, err)
	}
	return n
}
