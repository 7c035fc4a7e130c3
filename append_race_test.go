package agentstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
	"github.com/google/uuid"
)

// TestAppendRacingSessionCreate: an append without an expected version
// that races the session's creation either finds no session (ErrNotFound)
// or appends; it never reports a stale version (it asked for none). Found
// by the langchaingo integration on PostgreSQL: the one-statement append's
// snapshot missed a session committed just after it began.
func TestAppendRacingSessionCreate(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		ctx := context.Background()
		st := h.New(t)
		other := h.New(t) // a second handle: the creator and the appenders do not share group commit
		for round := 0; round < 20; round++ {
			s := repo.NewSession()
			s.ID = uuid.New() // fixed before the goroutines start: Save must not assign it while appenders read it
			id := s.ID
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- other.Sessions().Save(ctx, s)
			}()
			for i := 0; i < 6; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := st.Sessions().AppendMessages(ctx, id, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`"hi"`)})
					if errors.Is(err, agentstore.ErrNotFound) {
						err = nil
					}
					errs <- err
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
			}
		}
	})
}
