package postgres

import (
	"fmt"
	"strings"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// The message search index on PostgreSQL (migration V8): a tsvector column
// search_tsv on the messages table, set by a BEFORE INSERT OR UPDATE OF
// content trigger in the inserting statement (so every append path, the
// one-statement fast path, group commit, Fork's copy, stays in step
// without knowing it), and a GIN index over it. The trigger's argument is
// the text search configuration the column is built with ('simple' from
// V8; see docs/search.md to change it). Two IMMUTABLE functions extract
// the indexed text from the content JSON (message_text, PL/pgSQL since V11
// so its plan is kept per connection instead of planned again in every
// writing transaction) and build the vector (message_tsv, SQL, inlined);
// ts_headline reads message_text for snippets.

var _ dialect.Searcher = pgDialect{}

// pgSearchTrigger is the trigger's name: PostgreSQL scopes trigger names
// to their table, so the name is the same for every prefix and schema
// (and must not look like a prefixed name, which migrations.Render would
// schema-qualify).
const pgSearchTrigger = "trg_messages_search"

// pgHeadlineOptions are ts_headline's options: the markers the engine
// turns into highlight spans, about 30 words in at most two fragments.
const pgHeadlineOptions = "StartSel=" + dialect.SnippetOpen + ", StopSel=" + dialect.SnippetClose +
	`, MaxWords=30, MinWords=12, ShortWord=0, MaxFragments=2, FragmentDelimiter=" … "`

// pgSearchDDL is the search index for the default prefix on an empty
// database: the statements V8 runs (V8 adds the re-run guards, the
// backfill and CONCURRENTLY), message_text as V11 replaced it, the
// index with the pending list V12 gives it.
const (
	pgSearchColumn = `ALTER TABLE "agentstore_messages" ADD COLUMN IF NOT EXISTS "search_tsv" tsvector`
	pgSearchTextFn = `CREATE OR REPLACE FUNCTION "agentstore_message_text"(c json) RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN RETURN (
WITH RECURSIVE t(v, k, d, p) AS (SELECT c::jsonb, NULL::text, 0, ARRAY[]::bigint[]
UNION ALL SELECT x.v, x.k, t.d + 1, t.p || x.n FROM t CROSS JOIN LATERAL (
SELECT e.v, NULL::text AS k, e.n FROM jsonb_array_elements(CASE WHEN jsonb_typeof(t.v) = 'array' THEN t.v END) WITH ORDINALITY AS e(v, n)
UNION ALL SELECT o.value, o.key, o.n FROM jsonb_each(CASE WHEN jsonb_typeof(t.v) = 'object' THEN t.v END) WITH ORDINALITY AS o(key, value, n)) AS x
WHERE jsonb_typeof(t.v) IN ('array', 'object'))
SELECT left(translate(string_agg(left(t.v #>> '{}', 100000), chr(10) ORDER BY t.p), chr(57344) || chr(57345), ''), 100000)
FROM t WHERE jsonb_typeof(t.v) = 'string' AND (t.d <= 1 OR t.k IN ('text', 'content')))
; END
$$`
	pgSearchTsvFn = `CREATE OR REPLACE FUNCTION "agentstore_message_tsv"(c json, cfg regconfig) RETURNS tsvector LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT to_tsvector(cfg, translate(COALESCE("agentstore_message_text"(c), ''), '!"#$%&''()*+,-./:;<=>?@[\]^_` + "`" + `{|}~', '                                '))
$$`
	pgSearchTriggerFn = `CREATE OR REPLACE FUNCTION "agentstore_message_search_tsv"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW."search_tsv" := "agentstore_message_tsv"(NEW."content", CAST(TG_ARGV[0] AS regconfig)); RETURN NEW; END
$$`
	pgSearchTriggerDDL = `CREATE TRIGGER "` + pgSearchTrigger + `" BEFORE INSERT OR UPDATE OF "content" ON "agentstore_messages" FOR EACH ROW EXECUTE FUNCTION "agentstore_message_search_tsv"('simple')`
	pgSearchIndex      = `CREATE INDEX IF NOT EXISTS "idx_agentstore_messages_search" ON "agentstore_messages" USING gin ("search_tsv") WITH (gin_pending_list_limit = 128)`
)

// SearchDDL implements dialect.Searcher.
func (pgDialect) SearchDDL() []string {
	return []string{pgSearchColumn, pgSearchTextFn, pgSearchTsvFn, pgSearchTriggerFn, pgSearchTriggerDDL, pgSearchIndex}
}

// SearchObjects implements dialect.Searcher.
func (pgDialect) SearchObjects(prefix string) (columns, indexes []string) {
	return []string{"search_tsv"}, []string{"idx_" + prefix + models.TableMessages + "_search"}
}

// tsQuery renders the terms as to_tsquery text: words quoted (they hold
// only letters, digits and marks), phrases with <->, prefixes with :*,
// terms joined by &.
func tsQuery(terms []dialect.SearchTerm) string {
	var b strings.Builder
	for i, t := range terms {
		if i > 0 {
			b.WriteString(" & ")
		}
		if len(t.Words) > 1 {
			b.WriteByte('(')
		}
		for j, w := range t.Words {
			if j > 0 {
				b.WriteString(" <-> ")
			}
			b.WriteString("'" + strings.ReplaceAll(w.Text, "'", "''") + "'")
			if w.Prefix {
				b.WriteString(":*")
			}
		}
		if len(t.Words) > 1 {
			b.WriteByte(')')
		}
	}
	return b.String()
}

// SearchPage implements dialect.Searcher: the GIN index finds the
// matches, ts_rank (normalised by the log of the document length) scores
// them, and ts_headline runs on the page's rows only.
func (pgDialect) SearchPage(db *gorm.DB, env *dialect.Env, q *dialect.SearchQuery) ([]dialect.SearchRow, error) {
	const rank = `CAST(ts_rank(m."search_tsv", x.q, 1) AS double precision)`
	args := []any{q.Language, pgHeadlineOptions, q.Language, tsQuery(q.Terms)}
	args = append(args, q.FilterArgs...)
	keyset := ""
	if q.After != nil {
		keyset = ` AND (` + rank + ` < ? OR (` + rank + ` = ? AND (m.session_id, m.seq) > (?, ?)))`
		args = append(args, q.After.Score, q.After.Score, q.After.SessionID, q.After.Seq)
	}
	args = append(args, q.Limit)
	stmt := `SELECT p.session_id, p.seq, p.id, p.role, p.created_at, p.score,
		ts_headline(CAST(? AS regconfig), COALESCE(` + env.Quote("message_text") + `(p.content), ''), p.q, ?) AS snippet
		FROM (SELECT m.session_id, m.seq, m.id, m.role, m.created_at, m.content, x.q, ` + rank + ` AS score
			FROM ` + env.Quote(models.TableMessages) + ` m, (SELECT to_tsquery(CAST(? AS regconfig), ?) AS q) x
			WHERE m."search_tsv" @@ x.q` + q.Filter + keyset + `
			ORDER BY score DESC, m.session_id, m.seq LIMIT ?) p
		ORDER BY p.score DESC, p.session_id, p.seq`
	rows, err := db.Raw(stmt, args...).Rows()
	if err != nil {
		return nil, err
	}
	return dialect.ScanSearchRows(rows, false, true)
}

// SearchIssues implements dialect.Searcher: the functions, the trigger
// (enabled, with the Store's text search configuration as its argument);
// the column and the index are checked with the models' (Verify reports
// them missing as its own issues when the table lacks them).
func (pgDialect) SearchIssues(db *gorm.DB, env *dialect.Env, nsp string) ([]dialect.SchemaIssue, error) {
	table := env.Config.Prefix + models.TableMessages
	var out []dialect.SchemaIssue
	const migrate = "run `agentstore migrate` (Store.Migrate) or apply migration V8"
	for _, fn := range []string{"message_text(json)", "message_tsv(json, regconfig)", "message_search_tsv()"} {
		name := env.Config.Prefix + fn
		var ok bool
		if err := db.Raw(`SELECT to_regprocedure(quote_ident(?) || '.' || ?) IS NOT NULL`, nsp,
			quoteFn(name)).Scan(&ok).Error; err != nil {
			return nil, fmt.Errorf("read search functions: %w", err)
		}
		if !ok {
			out = append(out, dialect.SchemaIssue{Kind: dialect.IssueSearchIndex, Table: table, Object: "function " + name,
				Expected: "present", Actual: "missing", Fix: migrate})
		}
	}
	var trg []struct {
		Enabled string
		Args    string
	}
	if err := db.Raw(`SELECT tg.tgenabled::text AS enabled, encode(tg.tgargs, 'escape') AS args
		FROM pg_catalog.pg_trigger tg JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = ? AND c.relname = ? AND tg.tgname = ?`, nsp, table, pgSearchTrigger).Scan(&trg).Error; err != nil {
		return nil, fmt.Errorf("read search trigger: %w", err)
	}
	want := env.Config.SearchLanguage
	if want == "" {
		want = "simple"
	}
	switch {
	case len(trg) == 0:
		out = append(out, dialect.SchemaIssue{Kind: dialect.IssueSearchIndex, Table: table, Object: "trigger " + pgSearchTrigger,
			Expected: "present", Actual: "missing", Fix: migrate})
	case trg[0].Enabled == "D":
		out = append(out, dialect.SchemaIssue{Kind: dialect.IssueSearchIndex, Table: table, Object: "trigger " + pgSearchTrigger,
			Expected: "enabled", Actual: "disabled", Fix: fmt.Sprintf(`ALTER TABLE %s ENABLE TRIGGER "%s"`, env.Quote(models.TableMessages), pgSearchTrigger)})
	default:
		got := strings.TrimSuffix(trg[0].Args, `\000`)
		if got != want {
			out = append(out, dialect.SchemaIssue{Kind: dialect.IssueSearchIndex, Table: table, Object: "search language",
				Expected: want, Actual: got, Fix: pgLanguageFix(env, want)})
		}
	}
	return out, nil
}

// quoteFn quotes the name of fn ("name(args)") for to_regprocedure.
func quoteFn(fn string) string {
	i := strings.IndexByte(fn, '(')
	return `"` + fn[:i] + `"` + fn[i:]
}

// pgLanguageFix is the SQL that rebuilds the search column with another
// text search configuration (see docs/search.md).
func pgLanguageFix(env *dialect.Env, lang string) string {
	t := env.Quote(models.TableMessages)
	lit := "'" + strings.ReplaceAll(lang, "'", "''") + "'"
	return fmt.Sprintf(`DROP TRIGGER "%s" ON %s;
CREATE TRIGGER "%s" BEFORE INSERT OR UPDATE OF "content" ON %s FOR EACH ROW EXECUTE FUNCTION %s(%s);
UPDATE %s SET "search_tsv" = %s("content", %s)`,
		pgSearchTrigger, t, pgSearchTrigger, t, env.Quote("message_search_tsv"), lit, t, env.Quote("message_tsv"), lit)
}
