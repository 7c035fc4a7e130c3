package dialect

import (
	"database/sql"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/repo"
)

// Full-text search over messages (repo.Sessions.Search): the parsed query
// the engine hands a dialect, and the optional interface a dialect with a
// message search index implements.

// SearchWord is one word of a parsed search query: letters, digits and
// combining marks only (so it can never be query syntax of any database),
// lower-cased.
type SearchWord struct {
	Text string
	// Prefix: the word matches every word that starts with it (word*).
	Prefix bool
}

// SearchTerm is one term of a parsed query: one word, or a phrase (the
// words in order, next to each other). A message matches a query when it
// matches every term.
type SearchTerm struct {
	Words []SearchWord
}

// The highlight markers a dialect's snippet puts around each match: two
// private-use characters the indexed text never holds (its extraction
// drops them), which the engine turns into repo.TextSpan ranges.
const (
	SnippetOpen  = "\uE000"
	SnippetClose = "\uE001"
)

// isWordRune reports whether r belongs to a word: a letter, a digit
// (any number) or a combining mark; every other character separates words.
func isWordRune(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsNumber(r) || unicode.IsMark(r)
}

// ParseSearchQuery parses q (see repo.SearchParams for the syntax) into
// its terms. Every input either parses or is an error matching
// repo.ErrInvalidInput: an invalid UTF-8 string, a NUL byte, more than
// repo.MaxSearchQueryLen bytes or repo.MaxSearchTerms words, or no word at
// all. The words of the result hold only letters, digits and combining
// marks.
func ParseSearchQuery(q string) ([]SearchTerm, error) {
	switch {
	case len(q) > repo.MaxSearchQueryLen:
		return nil, fmt.Errorf("%w: search query is %d bytes, the limit is %d", repo.ErrInvalidInput, len(q), repo.MaxSearchQueryLen)
	case !utf8.ValidString(q):
		return nil, fmt.Errorf("%w: search query is not valid UTF-8", repo.ErrInvalidInput)
	case strings.IndexByte(q, 0) >= 0:
		return nil, fmt.Errorf("%w: search query contains a NUL byte", repo.ErrInvalidInput)
	}
	var (
		terms  []SearchTerm
		nwords int
	)
	// words splits s into words; a '*' right after a word makes it a prefix.
	words := func(s string) []SearchWord {
		var out []SearchWord
		rs := []rune(s)
		for i := 0; i < len(rs); {
			if !isWordRune(rs[i]) {
				i++
				continue
			}
			j := i
			for j < len(rs) && isWordRune(rs[j]) {
				j++
			}
			w := SearchWord{Text: strings.ToLower(string(rs[i:j]))}
			if j < len(rs) && rs[j] == '*' {
				w.Prefix = true
			}
			// A run of combining marks alone is no word (no database
			// tokenizer makes one of it).
			if strings.IndexFunc(w.Text, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }) >= 0 {
				out = append(out, w)
			}
			i = j
		}
		return out
	}
	add := func(ws []SearchWord) {
		if len(ws) == 0 {
			return
		}
		nwords += len(ws)
		terms = append(terms, SearchTerm{Words: ws})
	}
	for i := 0; i < len(q); {
		switch {
		case q[i] == '"':
			end := strings.IndexByte(q[i+1:], '"')
			if end < 0 {
				add(words(q[i+1:]))
				i = len(q)
				continue
			}
			add(words(q[i+1 : i+1+end]))
			i += end + 2
		default:
			// A bare token runs to the next space or quote; punctuation
			// inside it splits it into a phrase of its words (don't, a-b).
			j := i
			for j < len(q) && q[j] != '"' {
				r, n := utf8.DecodeRuneInString(q[j:])
				if unicode.IsSpace(r) {
					break
				}
				j += n
			}
			if j == i { // a space
				_, n := utf8.DecodeRuneInString(q[i:])
				i += n
				continue
			}
			add(words(q[i:j]))
			i = j
		}
	}
	switch {
	case nwords == 0:
		return nil, fmt.Errorf("%w: search query has no word to search for (only spaces, punctuation or operators)", repo.ErrInvalidInput)
	case nwords > repo.MaxSearchTerms:
		return nil, fmt.Errorf("%w: search query has %d words, the limit is %d", repo.ErrInvalidInput, nwords, repo.MaxSearchTerms)
	}
	return terms, nil
}

// SearchQuery is what the engine hands a Searcher for one page.
type SearchQuery struct {
	Terms []SearchTerm
	// Language is the text search configuration (WithSearchLanguage).
	Language string
	// Filter is a condition over the messages table aliased m (it may
	// reference m's columns and the sessions table), starting with " AND",
	// with its ? parameters FilterArgs; "" for none.
	Filter     string
	FilterArgs []any
	// After, when set, is the last hit of the previous page: the page
	// starts after it in the order (score descending, session id, seq).
	After *SearchKey
	// Limit is the number of rows to return (the engine asks for one
	// more than the page size).
	Limit int
}

// SearchKey is a position in a search's order.
type SearchKey struct {
	Score     float64
	SessionID uuid.UUID
	Seq       int64
}

// SearchRow is one row of a search page: the hit's key and data.
// CreatedAt is the column's value as the driver returns it (the engine
// decodes it); Snippet holds SnippetOpen/SnippetClose markers; DocID is
// the dialect's own row key (0 when it has none).
type SearchRow struct {
	SessionID uuid.UUID
	Seq       int64
	ID        string
	Role      string
	CreatedAt any
	Score     float64
	Snippet   string
	DocID     int64
}

// ScanSearchRows reads the rows of a SearchPage statement and closes them.
// Each row's columns are, in order: the row's DocID when docID, then the
// session id (text), seq, id, role, created_at and score, then the
// snippet (NULL for none) when snippet. A session id that is not a UUID
// is an error naming it.
func ScanSearchRows(rows *sql.Rows, docID, snippet bool) ([]SearchRow, error) {
	defer rows.Close()
	var (
		r    SearchRow
		sid  string
		snip sql.NullString
	)
	dest := make([]any, 0, 8) // the row's columns, scanned into r, sid and snip
	if docID {
		dest = append(dest, &r.DocID)
	}
	dest = append(dest, &sid, &r.Seq, &r.ID, &r.Role, &r.CreatedAt, &r.Score)
	if snippet {
		dest = append(dest, &snip)
	}
	var out []SearchRow
	for rows.Next() {
		r, snip = SearchRow{}, sql.NullString{}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		var err error
		if r.SessionID, err = uuid.Parse(sid); err != nil {
			return nil, fmt.Errorf("search: session id %q: %w", sid, err)
		}
		r.Snippet = snip.String
		out = append(out, r)
	}
	return out, rows.Err()
}

// Searcher is implemented by a dialect whose schema has the message
// search index (migration V8 on both dialects).
type Searcher interface {
	// SearchPage reads one page of q, in the order (score descending,
	// session id, seq), at most q.Limit rows.
	SearchPage(db *gorm.DB, env *Env, q *SearchQuery) ([]SearchRow, error)
	// SearchObjects names the search index's objects on the models'
	// tables that Verify must not report as extra (columns and indexes of
	// the table with base name models.TableMessages): unqualified names,
	// for the Store's prefix.
	SearchObjects(prefix string) (columns, indexes []string)
	// SearchDDL returns the statements that create the search index on an
	// empty database, written for the default table prefix (the engine
	// renders them): what the models' DDL adds to GORM's (ModelsDDL), and
	// the catalog the migration chain builds.
	SearchDDL() []string
	// SearchIssues checks the search index's objects (those outside the
	// models: tables, triggers, functions; and the configured language)
	// and returns what is missing or different.
	SearchIssues(db *gorm.DB, env *Env, nsp string) ([]SchemaIssue, error)
}

// SearchFixer is implemented by a Searcher whose missing search column or
// index (SearchObjects) is fixed otherwise than by applying migration V8
// again (MariaDB: its index is V15's, built with stop words off).
type SearchFixer interface {
	// SearchFix returns the fix of the missing object ("column name" or
	// "index name", unqualified as SearchObjects names it).
	SearchFix(env *Env, object string) string
}

// IssueSearchIndex: an object of the message search index (a table,
// trigger, function, column or index outside the models, or its text
// search configuration) is missing or differs from what this build
// expects.
const IssueSearchIndex IssueKind = "search_index"

// MigrationRewriter is implemented by a dialect whose driver needs a
// committed migration's statements spelled otherwise (SQLite without cgo:
// the search index's FTS4 table becomes FTS5). The engine applies it to
// every rendered migration it runs, plans or exports.
type MigrationRewriter interface {
	// RewriteMigration returns the rendered migration sql as this build
	// runs it.
	RewriteMigration(sql string) string
}

// SearchSnippet makes a snippet of text for the terms, for a dialect
// whose database has no snippet function (MariaDB): an excerpt of at most
// words words around the first match, cut at word boundaries (" … "
// where the text goes on), with every matched word between SnippetOpen
// and SnippetClose. Words are split as ParseSearchQuery splits them and
// compared lower-cased (a prefix word matches the words starting with
// it; a phrase, its words in a row). A text without a match gives its
// first words, unmarked.
func SearchSnippet(text string, terms []SearchTerm, words int) string {
	type tok struct {
		start, end int
		low        string
	}
	var toks []tok
	for i := 0; i < len(text); {
		r, n := utf8.DecodeRuneInString(text[i:])
		if !isWordRune(r) {
			i += n
			continue
		}
		j := i + n
		for j < len(text) {
			r, n := utf8.DecodeRuneInString(text[j:])
			if !isWordRune(r) {
				break
			}
			j += n
		}
		toks = append(toks, tok{start: i, end: j, low: strings.ToLower(text[i:j])})
		i = j
	}
	if len(toks) == 0 || words <= 0 {
		return ""
	}
	marked := make([]bool, len(toks))
	first := -1
	for _, t := range terms {
		for i := 0; i+len(t.Words) <= len(toks); i++ {
			ok := true
			for k, w := range t.Words {
				low := toks[i+k].low
				if (w.Prefix && !strings.HasPrefix(low, w.Text)) || (!w.Prefix && low != w.Text) {
					ok = false
					break
				}
			}
			if !ok {
				continue
			}
			for k := range t.Words {
				marked[i+k] = true
			}
			if first < 0 || i < first {
				first = i
			}
		}
	}
	start := 0
	if first > words/4 {
		start = first - words/4
	}
	end := min(len(toks), start+words)
	if end-start < words {
		start = max(0, end-words)
	}
	var b strings.Builder
	if start > 0 {
		b.WriteString("… ")
	} else {
		b.WriteString(strings.TrimLeftFunc(text[:toks[0].start], unicode.IsSpace))
	}
	for i := start; i < end; i++ {
		if i > start {
			b.WriteString(text[toks[i-1].end:toks[i].start])
		}
		if marked[i] {
			b.WriteString(SnippetOpen + text[toks[i].start:toks[i].end] + SnippetClose)
		} else {
			b.WriteString(text[toks[i].start:toks[i].end])
		}
	}
	if end < len(toks) {
		b.WriteString(" …")
	} else {
		b.WriteString(strings.TrimRightFunc(text[toks[end-1].end:], unicode.IsSpace))
	}
	return b.String()
}
