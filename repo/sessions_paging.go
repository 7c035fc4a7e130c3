package repo

import "time"

// PageParams selects one page of a keyset-paged read (ListChildrenPage,
// GetSummariesPage, PlansPage, PendingQueuePage, and the provider's
// ListInstancesPage, ListInstancesByStatusPage, ListExecutionsPage).
//
// Each page is one index range after the cursor, so reading page k costs
// the same as reading page 1 however many rows precede it, and a walk from
// After "" until the returned next cursor is "" returns every row that
// existed for the whole walk exactly once, in the call's order (rows
// inserted or deleted meanwhile may or may not appear, never twice).
type PageParams struct {
	// Limit is the page size: 0 means DefaultPageLimit; a negative limit
	// or one above MaxPageLimit is ErrInvalidInput.
	Limit int
	// After is the next cursor a previous page of the same call returned,
	// "" for the first page. Cursors are opaque strings; a cursor that is
	// malformed or was returned by another call is ErrInvalidInput.
	After string
}

// Page sizes of PageParams.
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// Defaults of SessionQueue.PurgeFinished.
const (
	// DefaultQueueRetention is how long PurgeFinished keeps finished items
	// when called with olderThan 0.
	DefaultQueueRetention = 7 * 24 * time.Hour
	// DefaultPurgeBatch is the batch size of PurgeFinished when called
	// with batch 0.
	DefaultPurgeBatch = 1000
	// MaxPurgeBatch is the largest batch PurgeFinished accepts.
	MaxPurgeBatch = 100_000
)
