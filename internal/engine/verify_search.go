package engine

import (
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// Verify's view of the message search index (migration V8): objects a
// dialect adds outside the GORM models. Its columns and indexes on the
// messages table are neither extra (Verify) nor undeclared (Migrate's
// index repair never drops them); whether they and the dialect's other
// search objects exist is checked here.

// IssueSearchIndex: an object of the message search index is missing or
// differs (see dialect.IssueSearchIndex).
const IssueSearchIndex = dialect.IssueSearchIndex

// searchExtras returns the search index's columns and indexes on table
// (unqualified, prefixed), as sets; nil when there are none.
func (s *Store) searchExtras(table string) (cols, idx map[string]bool) {
	sr, ok := s.d.(dialect.Searcher)
	if !ok || table != s.cfg.Prefix+models.TableMessages {
		return nil, nil
	}
	c, i := sr.SearchObjects(s.cfg.Prefix)
	cols, idx = map[string]bool{}, map[string]bool{}
	for _, n := range c {
		cols[n] = true
	}
	for _, n := range i {
		idx[n] = true
	}
	return cols, idx
}

// searchIssues reports missing search objects: the columns and indexes on
// the messages table (from the live catalog; an INVALID index too) and
// what the dialect checks itself. Nothing when the messages table is
// missing (Verify reports that).
func (s *Store) searchIssues(db *gorm.DB, nsp string, live map[string]*dialect.LiveTable) ([]SchemaIssue, error) {
	sr, ok := s.d.(dialect.Searcher)
	table := s.cfg.Prefix + models.TableMessages
	lt := live[table]
	if !ok || lt == nil {
		return nil, nil
	}
	const v8 = "run `agentstore migrate` (Store.Migrate) or apply migration V8"
	fix := func(object string) string {
		if f, ok := sr.(dialect.SearchFixer); ok {
			return f.SearchFix(s.env(), object)
		}
		return v8
	}
	var out []SchemaIssue
	cols, idx := s.searchExtras(table)
	for _, c := range sortedKeys(cols) {
		if _, ok := lt.Cols[c]; !ok {
			out = append(out, SchemaIssue{Kind: IssueSearchIndex, Table: table, Object: "column " + c, Expected: "present", Actual: "missing", Fix: fix("column " + c)})
		}
	}
	for _, i := range sortedKeys(idx) {
		li, ok := lt.Indexes[i]
		switch {
		case !ok:
			out = append(out, SchemaIssue{Kind: IssueSearchIndex, Table: table, Object: "index " + i, Expected: "present", Actual: "missing", Fix: fix("index " + i)})
		case li.Invalid:
			out = append(out, SchemaIssue{Kind: IssueSearchIndex, Table: table, Object: "index " + i, Expected: "valid", Actual: "INVALID",
				Fix: fmt.Sprintf("DROP INDEX %s; then %s", s.quotedIndex(i), v8)})
		}
	}
	more, err := sr.SearchIssues(db, s.env(), nsp)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", translateError(err))
	}
	// Migrate at head repairs indexes only: the fix of a missing trigger or
	// function is the statements of the Store's chain that create it (as
	// for the change feed's objects, verify_feed.go).
	for i := range more {
		is := &more[i]
		kind, name, ok := strings.Cut(is.Object, " ")
		if is.Actual != "missing" || !ok || (kind != "trigger" && kind != "function") {
			continue
		}
		name, _, _ = strings.Cut(name, "(") // a function's signature
		fix, err := s.creatingStatements(kind, name)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		is.Fix = fix
	}
	return append(out, more...), nil
}
