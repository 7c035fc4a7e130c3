package postgres

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/agentstore/agentstore/internal/dialect"

	"gorm.io/gorm"
)

// PostgreSQL catalog reading for Verify (pg_catalog).

// pgCatalog implements dialect.Catalog for PostgreSQL.
type pgCatalog struct{}

// pgTablesCTE selects the oid and name of the tables of one schema whose
// names are listed: its two parameters are the schema name and the names
// joined by commas (table names are identifiers, which hold no comma). The
// rows are found through the (relname, relnamespace) index of pg_class,
// so the cost does not grow with the rest of the catalog: on a server
// without autovacuum, where every dropped test schema leaves dead rows in
// pg_class and pg_attribute, a scan of a whole catalog table grows with
// every run. It reads the catalog with the query's snapshot (unlike
// to_regclass, whose cached lookups can miss a table another session
// created meanwhile).
const pgTablesCTE = `WITH t AS (SELECT c.oid, c.relname FROM pg_catalog.pg_class c
		WHERE c.relnamespace = (SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = ?)
			AND c.relname = ANY (string_to_array(?, ',')::name[]) AND c.relkind IN ('r', 'p'))
	`

// loadPostgresCatalog reads the columns, indexes and foreign keys of the
// named tables of schema nsp from pg_catalog. Tables that do not exist are
// absent from the result. Every catalog row is reached through an index
// (by table oid), never by a scan of a catalog table.
func loadPostgresCatalog(db *gorm.DB, nsp string, names []string) (map[string]*dialect.LiveTable, error) {
	tables := map[string]*dialect.LiveTable{}
	list := strings.Join(names, ",")
	var cols []struct {
		Tbl, Col, Typ    string
		NotNull, AutoInc bool
		Dflt             *string
	}
	if err := db.Raw(pgTablesCTE+`SELECT t.relname AS tbl, a.attname AS col, format_type(a.atttypid, a.atttypmod) AS typ, a.attnotnull AS not_null,
			(a.attidentity <> '' OR COALESCE(pg_get_expr(d.adbin, d.adrelid), '') LIKE 'nextval(%') AS auto_inc,
			pg_get_expr(d.adbin, d.adrelid) AS dflt
		FROM t
		JOIN pg_catalog.pg_attribute a ON a.attrelid = t.oid
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attnum > 0 AND NOT a.attisdropped
		ORDER BY t.relname, a.attnum`, nsp, list).Scan(&cols).Error; err != nil {
		return nil, fmt.Errorf("read columns of schema %s: %w", nsp, err)
	}
	for _, c := range cols {
		t := tables[c.Tbl]
		if t == nil {
			t = dialect.NewLiveTable()
			tables[c.Tbl] = t
		}
		t.Cols[c.Col] = dialect.LiveColumn{Type: c.Typ, NotNull: c.NotNull, AutoInc: c.AutoInc, Default: c.Dflt}
	}
	if err := loadPostgresIndexes(db, nsp, list, tables, false); err != nil {
		return nil, err
	}
	var fks []struct {
		Tbl, Name, RefTbl, OnDel, Cols, RefCols string
	}
	if err := db.Raw(pgTablesCTE+`SELECT t.relname AS tbl, con.conname AS name, rt.relname AS ref_tbl,
			CASE con.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT'
				WHEN 'r' THEN 'RESTRICT' ELSE 'NO ACTION' END AS on_del,
			(SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum) AS cols,
			(SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum) AS ref_cols
		FROM t
		JOIN pg_catalog.pg_constraint con ON con.conrelid = t.oid AND con.contype = 'f'
		JOIN pg_catalog.pg_class rt ON rt.oid = con.confrelid
		JOIN pg_catalog.pg_namespace rn ON rn.oid = rt.relnamespace
		WHERE rn.nspname = ?`, nsp, list, nsp).Scan(&fks).Error; err != nil {
		return nil, fmt.Errorf("read foreign keys of schema %s: %w", nsp, err)
	}
	for _, r := range fks {
		if t := tables[r.Tbl]; t != nil {
			t.FKs = append(t.FKs, dialect.LiveFK{Name: r.Name, Cols: dialect.SplitList(r.Cols), RefTable: r.RefTbl, RefCols: dialect.SplitList(r.RefCols), OnDelete: r.OnDel})
		}
	}
	return tables, nil
}

// loadPostgresIndexes reads the indexes of the tables of schema nsp named
// in list (comma-separated) into tables. With create, an existing table
// not yet in tables is added (with its indexes only); otherwise its
// indexes are skipped.
func loadPostgresIndexes(db *gorm.DB, nsp, list string, tables map[string]*dialect.LiveTable, create bool) error {
	var idx []struct {
		Tbl, Idx          string
		IsUnique, Primary bool
		Valid, Constraint bool
		Pred, Cols        string
	}
	if err := db.Raw(pgTablesCTE+`SELECT t.relname AS tbl, COALESCE(i.relname, '') AS idx, COALESCE(x.indisunique, false) AS is_unique,
			COALESCE(x.indisprimary, false) AS "primary", COALESCE(x.indisvalid, false) AS valid,
			EXISTS (SELECT 1 FROM pg_catalog.pg_constraint k WHERE k.conrelid = x.indrelid AND k.conindid = x.indexrelid AND k.contype IN ('p', 'u', 'x')) AS "constraint",
			COALESCE(pg_get_expr(x.indpred, x.indrelid), '') AS pred,
			COALESCE((SELECT string_agg(COALESCE(a.attname, '-') ||
					CASE WHEN ((x.indoption::int2[])[k.ord - 1] & 1) = 1 THEN ' DESC' ELSE '' END, ',' ORDER BY k.ord)
				FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
				LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum), '') AS cols
		FROM t
		LEFT JOIN pg_catalog.pg_index x ON x.indrelid = t.oid
		LEFT JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid`, nsp, list).Scan(&idx).Error; err != nil {
		return fmt.Errorf("read indexes of schema %s: %w", nsp, err)
	}
	for _, r := range idx {
		t := tables[r.Tbl]
		if t == nil {
			if !create {
				continue
			}
			t = dialect.NewLiveTable()
			tables[r.Tbl] = t
		}
		if r.Idx == "" {
			continue // a table without indexes
		}
		cs := dialect.SplitList(r.Cols)
		if r.Primary {
			t.PK = cs
		}
		t.Indexes[r.Idx] = dialect.LiveIndex{Unique: r.IsUnique, Where: r.Pred, Cols: cs, Constraint: r.Primary || r.Constraint, Invalid: !r.Valid}
	}
	return nil
}

// schemaName returns the configured schema, or the connection's current_schema().
func (pgCatalog) SchemaName(db *gorm.DB, configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	var cur *string
	if err := db.Raw("SELECT current_schema()").Scan(&cur).Error; err != nil {
		return "", fmt.Errorf("read current schema: %w", err)
	}
	if cur == nil || *cur == "" {
		return "", fmt.Errorf("the connection has no current schema (empty search_path); use WithSchema")
	}
	return *cur, nil
}

func (pgCatalog) Load(db *gorm.DB, nsp string, names []string) (map[string]*dialect.LiveTable, error) {
	return loadPostgresCatalog(db, nsp, names)
}

// loadIndexes reads only the indexes of the named tables that exist (one
// query).
func (pgCatalog) LoadIndexes(db *gorm.DB, nsp string, names []string) (map[string]*dialect.LiveTable, error) {
	tables := map[string]*dialect.LiveTable{}
	if err := loadPostgresIndexes(db, nsp, strings.Join(names, ","), tables, true); err != nil {
		return nil, err
	}
	return tables, nil
}

// hasTable reports whether table name exists in schema nsp ("" = the
// connection's current schema), reading pg_class with the statement's
// snapshot through its (relname, relnamespace) index.
func (pgCatalog) HasTable(db *gorm.DB, nsp, name string) (bool, error) {
	var ok bool
	err := db.Raw(`SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c
		WHERE c.relname = ? AND c.relkind IN ('r', 'p') AND c.relnamespace =
			(SELECT n.oid FROM pg_catalog.pg_namespace n WHERE n.nspname = COALESCE(NULLIF(?, ''), current_schema())))`, name, nsp).Scan(&ok).Error
	return ok, err
}

func (pgCatalog) ConnectionIssues(*gorm.DB) ([]dialect.SchemaIssue, error) { return nil, nil }

// pkNotNull: PostgreSQL makes every primary-key column NOT NULL.
func (pgCatalog) PKNotNull() bool { return true }

// namedForeignKeys: PostgreSQL keeps constraint names.
func (pgCatalog) NamedForeignKeys() bool { return true }

// normType: "character varying(32)" is "varchar(32)", "timestamp(6) with
// time zone" is "timestamptz(6)" (and a bare timestamptz has precision 6),
// serial types are their integer types. t is lower case, single-spaced.
func (pgCatalog) NormType(t string) string {
	if m := reTZ.FindStringSubmatch(t); m != nil {
		t = m[1] + "tz" + m[2]
	} else if m := reNoTZ.FindStringSubmatch(t); m != nil {
		t = m[1] + m[2]
	}
	t = reParenSpace.ReplaceAllString(t, "$1")
	t = strings.Replace(t, "character varying", "varchar", 1)
	t = strings.Replace(t, "character(", "char(", 1)
	switch t {
	case "bigserial", "serial8", "int8":
		return "bigint"
	case "serial", "serial4", "int4", "int":
		return "integer"
	case "smallserial", "serial2", "int2":
		return "smallint"
	case "bool":
		return "boolean"
	case "float8":
		return "double precision"
	case "float4":
		return "real"
	case "timestamptz", "timestamp", "timetz", "time":
		return t + "(6)"
	case "character":
		return "char(1)"
	}
	if strings.HasPrefix(t, "decimal") {
		t = "numeric" + strings.TrimPrefix(t, "decimal")
	}
	return t
}

var (
	reTZ         = regexp.MustCompile(`^(timestamp|time)(\(\d+\))? with time zone$`)
	reNoTZ       = regexp.MustCompile(`^(timestamp|time)(\(\d+\))? without time zone$`)
	reParenSpace = regexp.MustCompile(`\s*([(),])\s*`)
)
