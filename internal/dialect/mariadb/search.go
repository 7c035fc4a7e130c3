package mariadb

import (
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// The message search index on MariaDB (migration V15): a search_text
// column on the messages table, the message's indexed text (message_text:
// the strings of the content JSON, as on the other dialects) lower-cased
// with every run of characters that are not letters, digits or marks made
// one space, set by BEFORE INSERT / UPDATE triggers in the writing
// statement; and an InnoDB FULLTEXT index over it, built with stop words
// off.
//
// A search asks the index, in boolean mode, for every word it can hold
// (+word, +word*: innodb_ft_min_token_size to innodb_ft_max_token_size
// characters; a query word holds only letters, digits and marks, so it is
// never boolean-mode syntax), and checks what the index cannot answer with
// a regular expression over the candidate rows' search_text: a phrase (its
// words in a row), and a word shorter or longer than the index's tokens. A
// query with no word the index holds is that check over every message (a
// scan; docs/search.md).
//
// Relevance: as on SQLite, BM25's term-frequency part, tf·2.2 / (tf +
// 1.2·(0.25 + 0.75·len/400)), tf the occurrences of the query's terms
// (each term at least once), len search_text's length; no inverse document
// frequency (InnoDB's own MATCH score has one, so it changes with every
// append and would break the keyset cursor). The score is a DECIMAL(20,9),
// so the cursor compares it exactly.

var _ dialect.Searcher = mdDialect{}

// The search index for the default prefix on an empty database: the
// statements V15 runs (V15 adds the backfill of stored messages).
const (
	mdSearchSQLMode = `SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',ANSI_QUOTES,NO_BACKSLASH_ESCAPES')`
	mdSearchColumn  = `ALTER TABLE "agentstore_messages" ADD COLUMN IF NOT EXISTS "search_text" longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci NULL`
	mdSearchTextFn  = `CREATE OR REPLACE FUNCTION "agentstore_message_text"(c longtext) RETURNS longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DETERMINISTIC NO SQL
BEGIN
  DECLARE p, v, t longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DEFAULT NULL
; DECLARE path text CHARACTER SET utf8mb4 COLLATE utf8mb4_bin
; DECLARE n, i int DEFAULT 0
; IF c IS NULL OR NOT JSON_VALID(c) THEN RETURN NULL
; END IF
; SET p = JSON_SEARCH(c, 'all', '%')
; IF p IS NULL THEN RETURN NULL
; END IF
; IF LEFT(p, 1) <> '[' THEN SET p = CONCAT('[', p, ']')
; END IF
; SET n = JSON_LENGTH(p)
; WHILE i < n AND (t IS NULL OR CHAR_LENGTH(t) < 100000) DO
    SET path = JSON_UNQUOTE(JSON_EXTRACT(p, CONCAT('$[', i, ']')))
  ; IF path = '$' OR path REGEXP '^[$][[][0-9]+[]]$' OR path REGEXP '[.](text|content)$' THEN
      SET v = JSON_UNQUOTE(JSON_EXTRACT(c, path))
    ; IF v IS NOT NULL THEN SET t = CONCAT_WS(CHAR(10), t, LEFT(v, 100000))
    ; END IF
  ; END IF
  ; SET i = i + 1
; END WHILE
; RETURN LEFT(REPLACE(REPLACE(t, CHAR(0xEE8080 USING utf8mb4), ''), CHAR(0xEE8081 USING utf8mb4), ''), 100000)
; END`
	mdSearchWordsFn = `CREATE OR REPLACE FUNCTION "agentstore_message_search_text"(c longtext) RETURNS longtext CHARACTER SET utf8mb4 COLLATE utf8mb4_bin DETERMINISTIC NO SQL
RETURN COALESCE(LOWER(REGEXP_REPLACE("agentstore_message_text"(c), '[^\p{L}\p{N}\p{M}]+', ' ')), '')`
	mdSearchInsertTrigger = `CREATE TRIGGER IF NOT EXISTS "agentstore_messages_search_insert" BEFORE INSERT ON "agentstore_messages" FOR EACH ROW
SET NEW."search_text" = "agentstore_message_search_text"(NEW."content")`
	mdSearchUpdateTrigger = `CREATE TRIGGER IF NOT EXISTS "agentstore_messages_search_update" BEFORE UPDATE ON "agentstore_messages" FOR EACH ROW
SET NEW."search_text" = IF(NEW."content" <=> OLD."content" AND NEW."search_text" IS NOT NULL, NEW."search_text", "agentstore_message_search_text"(NEW."content"))`
	mdSearchStopwordsOff = `SET SESSION innodb_ft_enable_stopword = OFF`
	mdSearchIndex        = `ALTER TABLE "agentstore_messages" ADD FULLTEXT INDEX IF NOT EXISTS "idx_agentstore_messages_search" ("search_text"), FORCE`
	mdSearchStopwordsOn  = `SET SESSION innodb_ft_enable_stopword = DEFAULT`
)

// SearchDDL implements dialect.Searcher.
func (mdDialect) SearchDDL() []string {
	return []string{mdSearchSQLMode, mdSearchColumn, mdSearchTextFn, mdSearchWordsFn, mdSearchInsertTrigger, mdSearchUpdateTrigger,
		mdSearchStopwordsOff, mdSearchIndex, mdSearchStopwordsOn}
}

// SearchObjects implements dialect.Searcher.
func (mdDialect) SearchObjects(prefix string) (columns, indexes []string) {
	return []string{"search_text"}, []string{"idx_" + prefix + models.TableMessages + "_search"}
}

// mdTermPattern is the regular expression (PCRE, over search_text: words
// separated by single spaces) of one occurrence of the term t, as a
// zero-width match at its start (so REGEXP_REPLACE can count
// occurrences by the markers it inserts).
func mdTermPattern(t dialect.SearchTerm) string {
	var b strings.Builder
	b.WriteString(`(?i)(?<![^ ])(?=`)
	for i, w := range t.Words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w.Text) // letters, digits and marks only: never regex syntax
		if w.Prefix {
			if i < len(t.Words)-1 {
				b.WriteString(`[^ ]*`)
			}
		} else {
			b.WriteString(`(?![^ ])`)
		}
	}
	b.WriteByte(')')
	return b.String()
}

// SearchPage implements dialect.Searcher in two statements: the page's
// keys and scores, then the snippets of those rows (their message_text,
// excerpted here).
func (mdDialect) SearchPage(db *gorm.DB, env *dialect.Env, q *dialect.SearchQuery) ([]dialect.SearchRow, error) {
	var sz struct{ Min, Max int }
	if err := db.Raw(`SELECT @@innodb_ft_min_token_size AS min, @@innodb_ft_max_token_size AS max`).Scan(&sz).Error; err != nil {
		return nil, err
	}
	var (
		against strings.Builder
		where   []string
		args    []any
		tf      []string
		targs   []any
	)
	for _, t := range q.Terms {
		pat := mdTermPattern(t)
		check := len(t.Words) > 1 // the index has no positions for us: phrases are checked
		for _, w := range t.Words {
			n := utf8.RuneCountInString(w.Text)
			if n < sz.Min || n > sz.Max {
				check = true // a word the index does not hold
				continue
			}
			if against.Len() > 0 {
				against.WriteByte(' ')
			}
			against.WriteString("+" + w.Text)
			if w.Prefix {
				against.WriteByte('*')
			}
		}
		if check {
			where = append(where, `m."search_text" REGEXP ?`)
			args = append(args, pat)
		}
		tf = append(tf, `GREATEST(1, CHAR_LENGTH(REGEXP_REPLACE(m."search_text", ?, CHAR(1))) - CHAR_LENGTH(m."search_text"))`)
		targs = append(targs, pat)
	}
	if against.Len() > 0 {
		where = append([]string{`MATCH(m."search_text") AGAINST(? IN BOOLEAN MODE)`}, where...)
		args = append([]any{against.String()}, args...)
	}
	score := `CAST(2.2e0 / (1e0 + 1.2e0 * (0.25e0 + 0.75e0 * CHAR_LENGTH(m."search_text") / 400e0) / (` +
		strings.Join(tf, " + ") + `)) AS DECIMAL(20,9))`
	all := append(targs, args...)
	all = append(all, q.FilterArgs...)
	having := ""
	if q.After != nil {
		having = ` HAVING score < CAST(? AS DECIMAL(20,9)) OR (score = CAST(? AS DECIMAL(20,9)) AND (session_id, seq) > (?, ?))`
		s := strconv.FormatFloat(q.After.Score, 'f', 9, 64)
		all = append(all, s, s, q.After.SessionID.String(), q.After.Seq)
	}
	all = append(all, q.Limit)
	stmt := `SELECT m.session_id AS session_id, m.seq AS seq, m.id, m.role, m.created_at, ` + score + ` AS score
		FROM ` + env.Quote(models.TableMessages) + ` m
		WHERE ` + strings.Join(where, " AND ") + q.Filter + having + `
		ORDER BY score DESC, session_id, seq LIMIT ?`
	rows, err := db.Raw(stmt, all...).Rows()
	if err != nil {
		return nil, err
	}
	out, err := dialect.ScanSearchRows(rows, false, false)
	if err != nil || len(out) == 0 {
		return out, err
	}
	// The snippets: the page's rows' indexed text, excerpted here.
	ph := strings.Repeat(",(?,?)", len(out))[1:]
	sargs := make([]any, 0, 2*len(out))
	for _, r := range out {
		sargs = append(sargs, r.SessionID.String(), r.Seq)
	}
	srows, err := db.Raw(`SELECT session_id, seq, `+env.Quote("message_text")+`(content) FROM `+env.Quote(models.TableMessages)+
		` WHERE (session_id, seq) IN (`+ph+`)`, sargs...).Rows()
	if err != nil {
		return nil, err
	}
	defer srows.Close()
	type key struct {
		sid string
		seq int64
	}
	text := make(map[key]string, len(out))
	for srows.Next() {
		var (
			k key
			s sql.NullString
		)
		if err := srows.Scan(&k.sid, &k.seq, &s); err != nil {
			return nil, err
		}
		text[k] = s.String
	}
	if err := srows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Snippet = dialect.SearchSnippet(text[key{out[i].SessionID.String(), out[i].Seq}], q.Terms, 30)
	}
	return out, nil
}

// SearchIssues implements dialect.Searcher: the two functions and the two
// triggers (the column and the FULLTEXT index are checked with the
// models', SearchObjects).
func (mdDialect) SearchIssues(db *gorm.DB, env *dialect.Env, nsp string) ([]dialect.SchemaIssue, error) {
	table := env.Config.Prefix + models.TableMessages
	const migrate = "run `agentstore migrate` (Store.Migrate) or apply migration V15"
	var out []dialect.SchemaIssue
	for _, fn := range []string{"message_text", "message_search_text"} {
		name := env.Config.Prefix + fn
		var n int64
		if err := db.Raw(`SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = ? AND routine_name = ? AND routine_type = 'FUNCTION'`,
			nsp, name).Scan(&n).Error; err != nil {
			return nil, fmt.Errorf("read search functions: %w", err)
		}
		if n == 0 {
			out = append(out, dialect.SchemaIssue{Kind: dialect.IssueSearchIndex, Table: table, Object: "function " + name,
				Expected: "present", Actual: "missing", Fix: migrate})
		}
	}
	for _, trg := range []string{"messages_search_insert", "messages_search_update"} {
		name := env.Config.Prefix + trg
		var n int64
		if err := db.Raw(`SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = ? AND trigger_name = ? AND event_object_table = ?`,
			nsp, name, table).Scan(&n).Error; err != nil {
			return nil, fmt.Errorf("read search triggers: %w", err)
		}
		if n == 0 {
			out = append(out, dialect.SchemaIssue{Kind: dialect.IssueSearchIndex, Table: table, Object: "trigger " + name,
				Expected: "present", Actual: "missing", Fix: migrate})
		}
	}
	return out, nil
}

var _ dialect.SearchFixer = mdDialect{}

// SearchFix implements dialect.SearchFixer: a missing FULLTEXT index is
// built again with stop words off, as V15 builds it, with the table
// rebuilt (FORCE: an index created again without it misses the rows
// written while there was none; writes wait for the rebuild); a missing
// column is V15's statements, each of which can run again.
func (mdDialect) SearchFix(env *dialect.Env, object string) string {
	if strings.HasPrefix(object, "index ") {
		return fmt.Sprintf("SET SESSION innodb_ft_enable_stopword = OFF; ALTER TABLE %s ADD FULLTEXT INDEX %s (\"search_text\"), FORCE; SET SESSION innodb_ft_enable_stopword = DEFAULT",
			env.Quote(models.TableMessages), `"`+strings.TrimPrefix(object, "index ")+`"`)
	}
	return "run `agentstore migrate` (Store.Migrate) or apply migration V15 again (each of its statements can run again)"
}
