package postgres

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/agentstore/agentstore/repo"
)

// TestTranslateDriverError_CitusDuplicateKey: Citus reports a unique
// violation on a worker as XX000 with PostgreSQL's text; it is a conflict
// like 23505, and any other XX000 is not classified as one.
func TestTranslateDriverError_CitusDuplicateKey(t *testing.T) {
	t.Parallel()
	d := pgDialect{}
	cases := []struct {
		err      *pgconn.PgError
		conflict bool
	}{
		{&pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "idx_agentstore_messages_session_msg"`}, true},
		{&pgconn.PgError{Code: "XX000", Message: `duplicate key value violates unique constraint "idx_agentstore_messages_session_msg_103002"`}, true},
		{&pgconn.PgError{Code: "XX000", Message: `could not find path for CTE "branch"`}, false},
	}
	for _, c := range cases {
		got, ok := d.TranslateDriverError(c.err)
		if !ok {
			t.Fatalf("%s %q: not translated", c.err.Code, c.err.Message)
		}
		if errors.Is(got, repo.ErrConflict) != c.conflict {
			t.Errorf("%s %q: ErrConflict = %v, want %v", c.err.Code, c.err.Message, !c.conflict, c.conflict)
		}
		var pe *pgconn.PgError
		if !errors.As(got, &pe) || pe != c.err {
			t.Errorf("%s: the driver's error is not in the chain: %v", c.err.Code, got)
		}
	}
}
