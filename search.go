package agentstore

import "github.com/agentstore/agentstore/internal/engine"

// Full-text search over messages: Sessions().Search (repo.Sessions.Search,
// repo.SearchParams; docs/search.md). The index is created by migration V8
// and kept in step by the database in the transaction of every append and
// delete.

// DefaultSearchLanguage is the text search configuration of a Store
// without WithSearchLanguage: PostgreSQL's "simple" (lower-casing only, no
// stemming, no stop words), the configuration migration V8 indexes with.
const DefaultSearchLanguage = engine.DefaultSearchLanguage

// WithSearchLanguage sets the PostgreSQL text search configuration Search
// parses queries with (default DefaultSearchLanguage): "english" stems
// words (running matches run) and drops English stop words. It must name
// the configuration the database's search column is built with — V8
// builds it with "simple" — or queries miss what the index spells
// differently: Verify reports a Store whose language differs from the
// database's (IssueSearchIndex) with the SQL that rebuilds the column
// (docs/search.md). name must match ^[A-Za-z_][A-Za-z0-9_]*$ (else
// ErrInvalidConfig). SQLite ignores it: its index folds case and
// diacritics and never stems.
func WithSearchLanguage(name string) Option { return engine.WithSearchLanguage(name) }

// IssueSearchIndex is the Verify issue kind of the message search index
// (migration V8): one of its objects outside the models (a table, trigger,
// function, column or index) is missing or differs, or the Store's
// WithSearchLanguage differs from the database's.
const IssueSearchIndex = engine.IssueSearchIndex
