package agentstore

import (
	"context"
	"io"

	"github.com/agentstore/agentstore/internal/engine"
)

// StreamVersion is the version of the export stream format this build
// writes and the newest it reads (docs/export.md).
const StreamVersion = engine.StreamVersion

// ExportParams selects what Store.Export writes: every session and every
// provider instance (the zero value), the sessions of one tenant (Tenant),
// or the listed sessions (Sessions). Tenant and Sessions exclude each
// other; with either, no provider instance is written (instances have no
// tenant). A selected session's selected sub-sessions and forks follow it;
// a selected session whose parent is not selected needs that parent stored
// where the stream is imported. Progress, if not nil, is called after each
// session and instance written.
type ExportParams = engine.ExportParams

// ImportParams configures Store.Import. Progress, if not nil, is called
// after each session and instance imported or skipped.
type ImportParams = engine.ImportParams

// TransferProgress is what an Export or Import has done so far: records,
// sessions, instances and messages.
type TransferProgress = engine.TransferProgress

// ExportReport is what Store.Export wrote: the record count, the count per
// record type and the stream's checksum ("sha256:<hex>").
type ExportReport = engine.ExportReport

// ImportReport is what Store.Import read (record counts and checksum, as
// the trailer has them) and did (sessions, instances and loose queue rows
// imported, and skipped because the store held them already).
type ImportReport = engine.ImportReport

// DeleteReport is what Store.DeleteTenant deleted, by table.
type DeleteReport = engine.DeleteReport

// ImportError is the error of an Import that stopped at a line: the line
// number (1 is the header), the record it names when the line could be
// read that far ("session <id>", "message <session>/<seq>", "header",
// "trailer"), and the cause (ErrInvalidStream, ErrTruncatedStream,
// ErrUnsupportedStreamVersion, ErrNotFound for a missing parent session,
// ErrConflict for a session or instance stored with other content, or a
// database error), which errors.Is and errors.As see through it.
type ImportError = engine.ImportError

// Export writes the sessions and provider instances p selects to w as an
// export stream: JSON Lines, a header, one record per stored row (each
// session followed by its messages, compactions, summaries, queue items,
// todos and plans; each instance by its executions, history, key-value
// entries and queue rows), and a trailer with the record counts and a
// SHA-256 checksum (docs/export.md). The same rows give the same bytes on
// SQLite and PostgreSQL. It reads in pages, so memory does not grow with
// the data. It refuses Tenant with Sessions, an invalid tenant and more
// than 10000 listed sessions with ErrInvalidInput, and a listed session
// that does not exist with ErrNotFound, before writing anything; a
// failed write to w returns w's error (the stream then has no trailer).
func (s *Store) Export(ctx context.Context, w io.Writer, p ExportParams) (ExportReport, error) {
	return s.e.Export(ctx, w, p)
}

// Import reads an export stream from r into the store, each session and
// each provider instance with all its rows in one transaction, keeping
// ids, sequence numbers, timestamps, versions and decimals. A session or
// instance the store already holds with the same version is skipped, so
// running an import again changes nothing and an interrupted import
// resumes when run again. It checks the trailer's counts and checksum. It
// stops at the first bad line with an *ImportError (see there); what it
// imported before that line is whole sessions and instances.
func (s *Store) Import(ctx context.Context, r io.Reader, p ImportParams) (ImportReport, error) {
	return s.e.Import(ctx, r, p)
}

// DeleteTenant deletes every session of tenant and everything stored
// under them (messages, compactions, summaries, queue items, todos, plans;
// sub-sessions and forks below them), in one transaction, and reports what
// it deleted by table: the call for a data-subject deletion request. A
// tenant with no sessions reports zeros. Provider instances have no tenant
// and are not touched; the change feed keeps its rows (ids, no content)
// until PurgeChanges. An invalid tenant id is ErrInvalidInput.
func (s *Store) DeleteTenant(ctx context.Context, tenant string) (DeleteReport, error) {
	return s.e.DeleteTenant(ctx, tenant)
}
