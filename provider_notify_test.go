package agentstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
)

func TestOpen_RejectsBadPollInterval(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second, time.Microsecond, time.Hour} {
		if _, err := agentstore.Open(context.Background(), "sqlite::memory:", agentstore.WithPollInterval(d)); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("WithPollInterval(%v) = %v, want ErrInvalidConfig", d, err)
		}
	}
}
