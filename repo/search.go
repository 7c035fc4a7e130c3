package repo

import (
	"strings"
	"time"

	"github.com/google/uuid"
)

// Full-text search over the messages of past conversations
// (Sessions.Search). See docs/search.md for the whole contract.
//
// What is indexed. A message's indexed text is taken from its content:
// when the content is a JSON string, that string; when it is an array of
// blocks, every string element of the array and, at any depth, every
// string value of an object member named "text" or "content" (a text
// block's text, a tool result's content string or the text of its
// nested blocks), in document order. JSON punctuation, keys and other
// values (numbers, ids, tool inputs under other names) are not indexed
// (on PostgreSQL the members of one object come in jsonb's key order).
// The characters U+E000 and U+E001 are dropped from the indexed text
// (snippets use them as highlight markers internally). Only the first
// 100,000 characters of a message's indexed text are indexed (a
// PostgreSQL tsvector holds at most 1 MB); words after them are not
// found. Every message of
// every branch is indexed: edits, regenerated answers, fork copies and
// compact summaries are found like any other message; a deleted session's
// messages are not.
//
// Words. Text and queries are split into words at every character that
// is not a letter, digit or combining mark ("sessions_search.go" is the
// three words sessions, search, go), and compared case-insensitively. On
// SQLite diacritics are also ignored (é matches e) and words are not
// stemmed; on PostgreSQL words are normalised by the Store's text search
// configuration (agentstore.WithSearchLanguage; the default "simple"
// lower-cases only and keeps diacritics).

// Limits of SearchParams.
const (
	// DefaultSearchLimit is the page size of Search with Limit 0.
	DefaultSearchLimit = 20
	// MaxSearchLimit is the largest page Search returns.
	MaxSearchLimit = 200
	// MaxSearchQueryLen bounds SearchParams.Query, in bytes.
	MaxSearchQueryLen = 1024
	// MaxSearchTerms bounds the words of a query (every word of every
	// phrase counted).
	MaxSearchTerms = 32
)

// SearchParams selects the messages Sessions.Search returns. Filters
// combine with AND.
//
// Query syntax (parsed by agentstore, never handed to the database as
// query syntax): a query is a list of terms separated by spaces, and a
// message matches when its indexed text holds every term.
//   - word: matches the word (foo).
//   - "a phrase": matches the words in this order, next to each other; an
//     unterminated quote runs to the end of the query.
//   - prefix*: a word immediately followed by * matches every word that
//     starts with it (in a phrase too: "quick bro*").
//
// There are no operators: AND, OR, NOT, NEAR, parentheses, colons, minus
// signs and other punctuation are not syntax; punctuation separates words
// (don't is the phrase "don t") and a word such as OR is searched like any
// other. A query with no word at all (empty, only punctuation or stars),
// longer than MaxSearchQueryLen bytes, with more than MaxSearchTerms
// words, not valid UTF-8 or holding a NUL byte is ErrInvalidInput, before
// any SQL. A query is never a database syntax error.
type SearchParams struct {
	// Query is the search text (see above).
	Query string
	// TenantID, when not nil, keeps the messages of that tenant's
	// sessions; a pointer to "" keeps sessions without a tenant; nil
	// searches every tenant. A tenant-scoped view ignores it and searches
	// its own tenant only.
	TenantID *string
	// SessionID, when not nil, keeps the messages of that session only
	// (no error when it does not exist: no hits).
	SessionID *uuid.UUID
	// Roles, when not empty, keeps messages of these roles (an unknown
	// role is ErrInvalidInput).
	Roles []Role
	// CreatedFrom and CreatedBefore, when not nil, keep messages with
	// CreatedFrom <= CreatedAt < CreatedBefore.
	CreatedFrom, CreatedBefore *time.Time
	// Limit is the page size: 0 means DefaultSearchLimit; negative or
	// above MaxSearchLimit is ErrInvalidInput.
	Limit int
	// After is the Next cursor of the previous page of the same search,
	// "" for the first page. Cursors are opaque; a malformed cursor, or
	// one from a search with another query or other filters, is
	// ErrInvalidInput.
	After string
}

// SearchPage is one page of Sessions.Search.
type SearchPage struct {
	// Hits are the page's messages, most relevant first.
	Hits []SearchHit
	// Next is the cursor of the next page (SearchParams.After), "" after
	// the last page.
	Next string
}

// SearchHit is one message Sessions.Search found.
type SearchHit struct {
	SessionID uuid.UUID
	MessageID string
	Seq       int64
	Role      Role
	CreatedAt time.Time
	// Snippet is an excerpt of the message's indexed text around the
	// matches (at most about 30 words; fragments joined by " … "), as
	// plain text. Highlights are the byte ranges of Snippet that matched
	// a term, in order and not overlapping; HighlightedSnippet marks them.
	Snippet    string
	Highlights []TextSpan
	// Score is the hit's relevance, higher is more relevant: a
	// database-specific, non-negative figure, comparable only between the
	// hits of one search.
	Score float64
}

// TextSpan is the byte range [Start, End) of a string.
type TextSpan struct {
	Start, End int
}

// HighlightedSnippet returns Snippet with each highlight enclosed in open
// and close (say "<mark>" and "</mark>"; the snippet is plain text, so
// escape it first for HTML and shift the spans, or escape the pieces).
func (h SearchHit) HighlightedSnippet(open, close string) string {
	var b strings.Builder
	prev := 0
	for _, sp := range h.Highlights {
		if sp.Start < prev || sp.End < sp.Start || sp.End > len(h.Snippet) {
			continue
		}
		b.WriteString(h.Snippet[prev:sp.Start])
		b.WriteString(open)
		b.WriteString(h.Snippet[sp.Start:sp.End])
		b.WriteString(close)
		prev = sp.End
	}
	b.WriteString(h.Snippet[prev:])
	return b.String()
}
