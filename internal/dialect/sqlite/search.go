package sqlite

import (
	"database/sql"
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// The message search index on SQLite (migrations V8 and V16): an FTS5
// table message_fts holding each message's indexed text under a stable
// docid (its rowid),
// and message_search mapping (session_id, seq) to that docid, both kept
// in step by triggers on the messages table, which run in the statement
// (and so the transaction) that inserts, updates or deletes a message —
// including the deletes of ON DELETE CASCADE.
//
// V8 made it an FTS4 table (mattn/go-sqlite3 compiles FTS5 only with the
// sqlite_fts5 build tag) in a cgo build and an FTS5 table in a
// CGO_ENABLED=0 one (modernc.org/sqlite has no FTS4). V16 makes it FTS5 in
// both: the cgo build compiles FTS5 in itself (internal/sqlitefts5). FTS4
// keeps a term's whole doclist in one leaf, and a lookup reads, in every
// segment, the leaf where the term sorts: a rare word sorting after a
// common one read that word's doclist, so its search grew with the
// number of messages (7 ms at 1e6); FTS5 reads one page per segment. Why
// not an external-content table over messages: its rowid is not an
// INTEGER PRIMARY KEY and VACUUM may renumber it; message_search's docid
// is.
//
// Relevance (BM25's term-frequency part, as it was with FTS4, which has
// no ranking function): tf·(k1+1) / (tf + k1·(1−b+b·len/400)) with k1 =
// 1.2, b = 0.75, tf the number of matched phrase instances (highlight()'s
// markers) and len the indexed text's length in characters; no inverse
// document frequency.

var _ dialect.Searcher = liteDialect{}

// liteExtract returns the expression of the indexed text of content c:
// the strings of json_tree that are the content itself, an element of
// the top-level array, or the value of a member named text or content, in
// document order, joined by newlines, without U+E000/U+E001; NULL for
// none, and for a stored content that is not JSON (never refused here:
// the row is reported by the reads, the index just has no text for it).
func liteExtract(c string) string {
	return `(SELECT substr(replace(replace(group_concat(atom, char(10)), char(57344), ''), char(57345), ''), 1, 100000) FROM (SELECT atom FROM json_tree(CASE WHEN json_valid(` +
		c + `) THEN ` + c + ` ELSE '[]' END) WHERE type = 'text' AND (path = '$' OR key IN ('text', 'content')) ORDER BY id))`
}

// The search index for the default prefix on an empty database: the
// statements V8 runs (V8 adds the backfill of existing messages).
func liteSearchDDL() []string {
	docid := func(r string) string {
		return `(SELECT "docid" FROM "agentstore_message_search" WHERE "session_id" = ` + r + `."session_id" AND "seq" = ` + r + `."seq")`
	}
	return []string{
		`CREATE TABLE "agentstore_message_search" ("docid" integer PRIMARY KEY,"session_id" uuid NOT NULL,"seq" integer NOT NULL)`,
		`CREATE UNIQUE INDEX "idx_agentstore_message_search_message" ON "agentstore_message_search"("session_id","seq")`,
		`CREATE VIRTUAL TABLE "agentstore_message_fts" USING fts4(body, tokenize=unicode61)`,
		`CREATE TRIGGER "agentstore_messages_search_insert" AFTER INSERT ON "agentstore_messages" BEGIN ` +
			`INSERT INTO "agentstore_message_search" ("session_id","seq") VALUES (NEW."session_id", NEW."seq"); ` +
			`INSERT INTO "agentstore_message_fts" (docid, body) VALUES (` + docid("NEW") + `, ` + liteExtract(`NEW."content"`) + `); END`,
		`CREATE TRIGGER "agentstore_messages_search_delete" AFTER DELETE ON "agentstore_messages" BEGIN ` +
			`DELETE FROM "agentstore_message_fts" WHERE docid = ` + docid("OLD") + `; ` +
			`DELETE FROM "agentstore_message_search" WHERE "session_id" = OLD."session_id" AND "seq" = OLD."seq"; END`,
		`CREATE TRIGGER "agentstore_messages_search_update" AFTER UPDATE OF "content" ON "agentstore_messages" BEGIN ` +
			`UPDATE "agentstore_message_fts" SET body = ` + liteExtract(`NEW."content"`) + ` WHERE docid = ` + docid("NEW") + `; END`,
	}
}

// liteSearchBackfill indexes the messages stored before V8.
func liteSearchBackfill() []string {
	return []string{
		`INSERT INTO "agentstore_message_search" ("session_id","seq") SELECT "session_id", "seq" FROM "agentstore_messages" ORDER BY "session_id", "seq"`,
		`INSERT INTO "agentstore_message_fts" (docid, body) SELECT r."docid", ` + liteExtract(`m."content"`) +
			` FROM "agentstore_message_search" r JOIN "agentstore_messages" m ON m."session_id" = r."session_id" AND m."seq" = r."seq"`,
	}
}

// SearchDDL implements dialect.Searcher: V8's statements as the builds
// run them, the FTS5 table as V16 makes it (columnsize=0: FTS5 keeps no
// token count per row, which neither the score, which uses the text's
// length, nor highlight() needs; an append writes one row less).
func (liteDialect) SearchDDL() []string {
	stmts := liteFTSStatements(liteSearchDDL())
	for i, st := range stmts {
		stmts[i] = strings.Replace(st, "USING fts5(body, tokenize=unicode61)", "USING fts5(body, tokenize=unicode61, columnsize=0)", 1)
	}
	return stmts
}

// RewriteMigration implements dialect.MigrationRewriter: V8's search
// index is an FTS5 table of the same name, column and tokenizer, its rows
// keyed by rowid (FTS5 has no docid alias), in every build, so that a
// fresh database never holds FTS4 (V16 turns the FTS4 index of a database
// a cgo build migrated before V16 into this one).
func (liteDialect) RewriteMigration(sql string) string { return liteFTSRewrite(sql) }

// liteFTSRewrite turns V8's FTS4 statements of the search index into
// FTS5's.
func liteFTSRewrite(sql string) string {
	return strings.NewReplacer("USING fts4(", "USING fts5(", "(docid, body)", "(rowid, body)", "WHERE docid = ", "WHERE rowid = ").Replace(sql)
}

func liteFTSStatements(stmts []string) []string {
	for i, st := range stmts {
		stmts[i] = liteFTSRewrite(st)
	}
	return stmts
}

// SearchBackfill returns V8's statements that index existing messages
// (for the migration test that compares V8 with SearchDDL).
func SearchBackfill() []string { return liteFTSStatements(liteSearchBackfill()) }

// SearchObjects implements dialect.Searcher: SQLite's search objects are
// tables and triggers of their own, none on the models' tables.
func (liteDialect) SearchObjects(string) (columns, indexes []string) { return nil, nil }

// matchQuery renders the terms as an FTS5 MATCH expression: each word a
// double-quoted string (so no word is ever an operator), a prefix word
// followed by *, the words of a phrase joined by + (FTS5 has prefixes
// only at a phrase's end, so a phrase is its words as one-word phrases:
// "a" + "b" * + "c"); terms separated by spaces (AND).
func matchQuery(terms []dialect.SearchTerm) string {
	var b strings.Builder
	for i, t := range terms {
		if i > 0 {
			b.WriteByte(' ')
		}
		for j, w := range t.Words {
			if j > 0 {
				b.WriteString(" + ")
			}
			b.WriteString(`"` + strings.ReplaceAll(w.Text, `"`, `""`) + `"`)
			if w.Prefix {
				b.WriteString(" *")
			}
		}
	}
	return b.String()
}

// liteScore is the relevance of the FTS row f (see the file comment); fc
// is f's hidden column (the table's name). The matched phrase instances
// are counted from highlight()'s markers (one per instance).
func liteScore(fc string) string {
	h := `highlight(` + fc + `, 0, char(1), '')`
	tf := `((length(` + h + `) - length(replace(` + h + `, char(1), ''))) * 1.0)`
	return `(` + tf + ` * 2.2 / (` + tf + ` + 1.2 * (0.25 + 0.75 * COALESCE(length(f.body), 0) / 400.0)))`
}

// liteSnippet is the snippet of the FTS row (hidden column fc) with the
// markers and ellipsis as the next three parameters, 30 tokens long.
func liteSnippet(fc string) string {
	return `snippet(` + fc + `, -1, ?, ?, ?, 30)`
}

// SearchPage implements dialect.Searcher in two statements: the page's
// keys and scores (the full-text match first: CROSS JOIN keeps FTS5 as
// the outer loop, so its MATCH runs once), then the snippets of those
// rows only.
func (liteDialect) SearchPage(db *gorm.DB, env *dialect.Env, q *dialect.SearchQuery) ([]dialect.SearchRow, error) {
	ft := env.Quote("message_fts")
	fc := "f." + ft
	match := matchQuery(q.Terms)
	args := append([]any{match}, q.FilterArgs...)
	keyset := ""
	if q.After != nil {
		keyset = ` WHERE k.score < ? OR (k.score = ? AND (k.session_id, k.seq) > (?, ?))`
		args = append(args, q.After.Score, q.After.Score, q.After.SessionID, q.After.Seq)
	}
	args = append(args, q.Limit)
	stmt := `SELECT k.docid, k.session_id, k.seq, k.id, k.role, k.created_at, k.score FROM (
		SELECT f.rowid AS docid, m.session_id AS session_id, m.seq AS seq, m.id AS id, m.role AS role, m.created_at AS created_at, ` +
		liteScore(fc) + ` AS score
		FROM ` + ft + ` f CROSS JOIN ` + env.Quote("message_search") + ` r CROSS JOIN ` + env.Quote(models.TableMessages) + ` m
		WHERE ` + fc + ` MATCH ? AND r.docid = f.rowid AND m.session_id = r.session_id AND m.seq = r.seq` + q.Filter + `) k` +
		keyset + ` ORDER BY k.score DESC, k.session_id, k.seq LIMIT ?`
	rows, err := db.Raw(stmt, args...).Rows()
	if err != nil {
		return nil, err
	}
	out, err := dialect.ScanSearchRows(rows, true, false)
	if err != nil || len(out) == 0 {
		return out, err
	}
	// The snippets of the page's rows: one full-text query bounded by the
	// page's docid range, filtered by "+f.rowid IN" (the unary plus keeps
	// the list from the full-text module: FTS5 would run the query once
	// per listed rowid, 10× slower for a page of 10 at 1e5 messages).
	ph := strings.Repeat(",?", len(out))[1:]
	lo, hi := out[0].DocID, out[0].DocID
	for _, r := range out {
		lo, hi = min(lo, r.DocID), max(hi, r.DocID)
	}
	sargs := []any{dialect.SnippetOpen, dialect.SnippetClose, " … ", match, lo, hi}
	for _, r := range out {
		sargs = append(sargs, r.DocID)
	}
	srows, err := db.Raw(`SELECT f.rowid, `+liteSnippet(fc)+` FROM `+ft+` f WHERE `+fc+` MATCH ? AND f.rowid BETWEEN ? AND ? AND +f.rowid IN (`+ph+`)`,
		sargs...).Rows()
	if err != nil {
		return nil, err
	}
	defer srows.Close()
	snip := make(map[int64]string, len(out))
	for srows.Next() {
		var (
			id int64
			s  sql.NullString
		)
		if err := srows.Scan(&id, &s); err != nil {
			return nil, err
		}
		snip[id] = s.String
	}
	if err := srows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Snippet = snip[out[i].DocID]
	}
	return out, nil
}

// SearchIssues implements dialect.Searcher: the tables and triggers exist.
func (liteDialect) SearchIssues(db *gorm.DB, env *dialect.Env, _ string) ([]dialect.SchemaIssue, error) {
	p := env.Config.Prefix
	want := []struct{ typ, name string }{
		{"table", p + "message_search"}, {"table", p + "message_fts"},
		{"trigger", p + "messages_search_insert"}, {"trigger", p + "messages_search_delete"}, {"trigger", p + "messages_search_update"},
	}
	var out []dialect.SchemaIssue
	for _, w := range want {
		var n int64
		if err := db.Raw(`SELECT COUNT(*) FROM sqlite_master WHERE type = ? AND name = ?`, w.typ, w.name).Scan(&n).Error; err != nil {
			return nil, fmt.Errorf("read search objects: %w", err)
		}
		if n == 0 {
			out = append(out, dialect.SchemaIssue{Kind: dialect.IssueSearchIndex, Table: p + models.TableMessages, Object: w.typ + " " + w.name,
				Expected: "present", Actual: "missing", Fix: "run `agentstore migrate` (Store.Migrate) or apply migration V8"})
		}
	}
	return out, nil
}
