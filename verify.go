package agentstore

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore/models"
)

// IssueKind classifies a SchemaIssue. The values are stable strings, used
// in the JSON output of `agentstore verify --json`.
type IssueKind string

// The kinds of issue Verify reports.
const (
	// MissingTable: a table of the models does not exist.
	MissingTable IssueKind = "missing_table"
	// MissingColumn: a column of the models does not exist in its table.
	MissingColumn IssueKind = "missing_column"
	// ColumnTypeMismatch: a column's type differs from the model's type.
	ColumnTypeMismatch IssueKind = "column_type_mismatch"
	// NullabilityMismatch: a column is NULL where the model says NOT NULL, or the reverse.
	NullabilityMismatch IssueKind = "nullability_mismatch"
	// PrimaryKeyMismatch: the table's primary key is missing or has other columns.
	PrimaryKeyMismatch IssueKind = "primary_key_mismatch"
	// MissingIndex: an index the models declare (by its generated name) does not exist.
	MissingIndex IssueKind = "missing_index"
	// IndexMismatch: an index exists but its columns, uniqueness or WHERE predicate differ.
	IndexMismatch IssueKind = "index_mismatch"
	// MissingForeignKey: a foreign key the models declare does not exist.
	MissingForeignKey IssueKind = "missing_foreign_key"
	// ForeignKeyMismatch: a foreign key exists but its ON DELETE action or columns differ.
	ForeignKeyMismatch IssueKind = "foreign_key_mismatch"
	// SchemaVersionBehind: the recorded schema version is older than SchemaVersion (or absent).
	SchemaVersionBehind IssueKind = "schema_version_behind"
	// SchemaVersionAhead: the database was migrated by a newer agentstore.
	SchemaVersionAhead IssueKind = "schema_version_ahead"
	// ForeignKeysDisabled: SQLite's foreign_keys pragma is OFF on the
	// connection, so foreign keys and ON DELETE CASCADE silently do nothing.
	ForeignKeysDisabled IssueKind = "foreign_keys_disabled"
)

// SchemaIssue is one difference between the live database and the models.
type SchemaIssue struct {
	// Kind classifies the issue.
	Kind IssueKind `json:"kind"`
	// Table is the unqualified table name ("" for connection-level issues).
	Table string `json:"table,omitempty"`
	// Object names the column, index or foreign key concerned ("" for table-level issues).
	Object string `json:"object,omitempty"`
	// Expected is what the models require (a type, "NOT NULL", an index or
	// foreign-key definition, a version).
	Expected string `json:"expected,omitempty"`
	// Actual is what the database has ("" when the object is missing).
	Actual string `json:"actual,omitempty"`
	// Fix suggests how to repair the issue, usually as SQL to run.
	Fix string `json:"fix"`
}

// String renders the issue on one line: kind, table, object, expected,
// actual and fix as key=value pairs.
func (i SchemaIssue) String() string {
	var b strings.Builder
	b.WriteString(string(i.Kind))
	if i.Table != "" {
		fmt.Fprintf(&b, " table=%s", i.Table)
	}
	if i.Object != "" {
		fmt.Fprintf(&b, " object=%s", i.Object)
	}
	if i.Expected != "" {
		fmt.Fprintf(&b, " expected=%q", i.Expected)
	}
	if i.Actual != "" {
		fmt.Fprintf(&b, " actual=%q", i.Actual)
	}
	if i.Fix != "" {
		fmt.Fprintf(&b, " fix=%q", i.Fix)
	}
	return b.String()
}

// VerifyReport is the result of Store.Verify.
type VerifyReport struct {
	// Dialect, Prefix and Schema describe what was inspected; Schema is the
	// PostgreSQL schema actually inspected (the store's, or current_schema()).
	Dialect Dialect `json:"dialect"`
	Prefix  string  `json:"prefix"`
	Schema  string  `json:"schema,omitempty"`
	// ExpectedVersion is SchemaVersion; DatabaseVersion the highest version
	// recorded in the database (0 when none).
	ExpectedVersion int64 `json:"expected_version"`
	DatabaseVersion int64 `json:"database_version"`
	// Tables is the number of model tables checked.
	Tables int `json:"tables"`
	// Issues lists every difference found; empty when the schema matches.
	Issues []SchemaIssue `json:"issues"`
}

// OK reports whether the schema has no issues.
func (r *VerifyReport) OK() bool { return len(r.Issues) == 0 }

// String renders one issue per line ("" when there are none).
func (r *VerifyReport) String() string {
	var b strings.Builder
	for _, i := range r.Issues {
		b.WriteString(i.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Verify compares the live database with the models of both domains and
// reports every difference: missing tables and columns, column types and
// nullability, primary keys, indexes (by the names the models generate,
// including uniqueness and partial-index predicates), foreign keys and
// their ON DELETE action, the recorded schema version and, on SQLite,
// whether foreign keys are enforced on the connection. It honours the
// store's prefix and schema (on PostgreSQL without WithSchema it inspects
// current_schema()). It changes nothing. An error means only that the
// database could not be inspected; schema differences are issues in the
// report.
func (s *Store) Verify(ctx context.Context) (*VerifyReport, error) {
	db := s.db.WithContext(ctx)
	if s.dialect != Postgres {
		return s.inspect(db)
	}
	// On PostgreSQL read the whole catalog from one snapshot. (Not on
	// SQLite: its transactions take the write lock at BEGIN.)
	var (
		rep  *VerifyReport
		ierr error
	)
	err := db.Transaction(func(tx *gorm.DB) error {
		rep, ierr = s.inspect(tx)
		return ierr
	}, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	switch {
	case ierr != nil:
		return nil, ierr // already wrapped by inspect
	case err != nil:
		return nil, fmt.Errorf("verify: %w", translateError(err))
	}
	return rep, nil
}

// inspect reads the catalog through db and compares it with the models.
func (s *Store) inspect(db *gorm.DB) (*VerifyReport, error) {
	rep := &VerifyReport{Dialect: s.dialect, Prefix: s.cfg.prefix, ExpectedVersion: SchemaVersion, Issues: []SchemaIssue{}}
	var (
		live map[string]*liveTable
		err  error
	)
	switch s.dialect {
	case Postgres:
		nsp := s.cfg.schema
		if nsp == "" {
			var cur *string
			if err := db.Raw("SELECT current_schema()").Scan(&cur).Error; err != nil {
				return nil, fmt.Errorf("verify: read current schema: %w", translateError(err))
			}
			if cur == nil || *cur == "" {
				return nil, fmt.Errorf("verify: the connection has no current schema (empty search_path); use WithSchema")
			}
			nsp = *cur
		}
		rep.Schema = nsp
		live, err = loadPostgresCatalog(db, nsp)
	case SQLite:
		live, err = loadSQLiteCatalog(db)
	default:
		return nil, configf("verify: unsupported dialect %q", s.dialect)
	}
	if err != nil {
		return nil, fmt.Errorf("verify: %w", translateError(err))
	}
	for _, m := range models.All() {
		exp, err := s.expectedTable(m)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		rep.Tables++
		rep.Issues = append(rep.Issues, s.compareTable(db, exp, live[exp.name])...)
	}
	if s.dialect == SQLite {
		var on int
		if err := db.Raw("PRAGMA foreign_keys").Scan(&on).Error; err != nil {
			return nil, fmt.Errorf("verify: read foreign_keys pragma: %w", translateError(err))
		}
		if on == 0 {
			rep.Issues = append(rep.Issues, SchemaIssue{Kind: ForeignKeysDisabled, Object: "foreign_keys",
				Expected: "ON", Actual: "OFF",
				Fix: "PRAGMA foreign_keys = ON on every connection (agentstore.Open's sqlite DSN does this; add _foreign_keys=on to your driver DSN)"})
		}
	}
	if vt := live[s.cfg.prefix+models.TableSchemaVersion]; vt != nil && vt.cols["version"].typ != "" {
		var v *int64
		if err := db.Raw("SELECT MAX(version) FROM " + s.quoted(models.TableSchemaVersion)).Scan(&v).Error; err != nil {
			return nil, fmt.Errorf("verify: read schema version: %w", translateError(err))
		}
		if v != nil {
			rep.DatabaseVersion = *v
		}
		switch {
		case rep.DatabaseVersion < SchemaVersion:
			actual := fmt.Sprint(rep.DatabaseVersion)
			if v == nil {
				actual = "none recorded"
			}
			rep.Issues = append(rep.Issues, SchemaIssue{Kind: SchemaVersionBehind, Table: s.cfg.prefix + models.TableSchemaVersion,
				Object: "version", Expected: fmt.Sprint(SchemaVersion), Actual: actual,
				Fix: fmt.Sprintf("run `agentstore migrate` (Store.Migrate) or apply the Flyway migrations up to V%d", SchemaVersion)})
		case rep.DatabaseVersion > SchemaVersion:
			rep.Issues = append(rep.Issues, SchemaIssue{Kind: SchemaVersionAhead, Table: s.cfg.prefix + models.TableSchemaVersion,
				Object: "version", Expected: fmt.Sprint(SchemaVersion), Actual: fmt.Sprint(rep.DatabaseVersion),
				Fix: "upgrade this program to the agentstore release that wrote the schema"})
		}
	}
	return rep, nil
}

// expected* describe what the models require of one table.
type expectedColumn struct {
	name    string
	typ     string // normalised
	rawType string // as the dialect spells it
	notNull bool
	field   *schema.Field
}

type expectedIndex struct {
	name   string
	unique bool
	where  string
	cols   []string
}

type expectedFK struct {
	name     string
	cols     []string
	refTable string
	refCols  []string
	onDelete string
}

type expectedTable struct {
	model   any
	name    string // unqualified, prefixed
	cols    []expectedColumn
	pk      []string
	indexes []expectedIndex
	fks     []expectedFK
}

// expectedTable parses model m with the store's GORM handle (so its naming
// strategy and dialect apply) into the columns, keys and indexes it needs.
func (s *Store) expectedTable(m any) (*expectedTable, error) {
	stmt := &gorm.Statement{DB: s.db}
	if err := stmt.Parse(m); err != nil {
		return nil, fmt.Errorf("parse model %T: %w", m, err)
	}
	sch := stmt.Schema
	mig, ok := s.db.Migrator().(interface{ DataTypeOf(*schema.Field) string })
	if !ok {
		return nil, fmt.Errorf("the %s migrator cannot report column types", s.dialect)
	}
	t := &expectedTable{model: m, name: s.unqualify(sch.Table)}
	for _, dbName := range sch.DBNames {
		f := sch.FieldsByDBName[dbName]
		if f.IgnoreMigration {
			continue
		}
		raw := mig.DataTypeOf(f)
		// A primary-key column is NOT NULL on PostgreSQL whatever it
		// declares; SQLite reports only the declared constraint.
		notNull := f.NotNull || (f.PrimaryKey && s.dialect == Postgres)
		t.cols = append(t.cols, expectedColumn{name: dbName, typ: s.normType(raw), rawType: raw, notNull: notNull, field: f})
	}
	for _, f := range sch.PrimaryFields {
		t.pk = append(t.pk, f.DBName)
	}
	for _, idx := range sch.ParseIndexes() {
		ei := expectedIndex{name: idx.Name, unique: strings.EqualFold(idx.Class, "UNIQUE"), where: idx.Where}
		for _, o := range idx.Fields {
			c := o.Expression
			if c == "" {
				c = o.DBName
			}
			if strings.EqualFold(o.Sort, "desc") {
				c += " DESC"
			}
			ei.cols = append(ei.cols, c)
		}
		t.indexes = append(t.indexes, ei)
	}
	for _, rel := range sch.Relationships.Relations {
		if rel.Field.IgnoreMigration {
			continue
		}
		c := rel.ParseConstraint()
		if c == nil || c.Schema != sch {
			continue
		}
		fk := expectedFK{name: c.Name, refTable: s.unqualify(c.ReferenceSchema.Table), onDelete: strings.ToUpper(c.OnDelete)}
		for _, f := range c.ForeignKeys {
			fk.cols = append(fk.cols, f.DBName)
		}
		for _, f := range c.References {
			fk.refCols = append(fk.refCols, f.DBName)
		}
		t.fks = append(t.fks, fk)
	}
	// Relations is a map: sort so the report is stable.
	slices.SortFunc(t.fks, func(a, b expectedFK) int { return strings.Compare(a.name, b.name) })
	return t, nil
}

// unqualify drops the store's schema from a table name.
func (s *Store) unqualify(table string) string {
	if s.cfg.schema != "" {
		return strings.TrimPrefix(table, s.cfg.schema+".")
	}
	return table
}

// compareTable lists the differences between exp and the live table lt (nil = missing).
func (s *Store) compareTable(db *gorm.DB, exp *expectedTable, lt *liveTable) []SchemaIssue {
	if lt == nil {
		return []SchemaIssue{{Kind: MissingTable, Table: exp.name, Fix: s.fixSQL(db, func(m gorm.Migrator) error { return m.CreateTable(exp.model) })}}
	}
	var out []SchemaIssue
	qt := s.quoted(strings.TrimPrefix(exp.name, s.cfg.prefix))
	for _, c := range exp.cols {
		lc, ok := lt.cols[c.name]
		if !ok {
			var fix string
			if s.dialect == SQLite && c.field.NotNull && !c.field.HasDefaultValue {
				// SQLite cannot add a NOT NULL column without a default.
				fix = sqliteRebuild(exp.name, "add "+c.name+" "+c.rawType+" NOT NULL")
			} else {
				fix = s.fixSQL(db, func(m gorm.Migrator) error { return m.AddColumn(exp.model, c.field.Name) })
			}
			out = append(out, SchemaIssue{Kind: MissingColumn, Table: exp.name, Object: c.name, Expected: c.rawType, Fix: fix})
			continue
		}
		if s.normType(lc.typ) == c.typ && c.field.AutoIncrement && !lc.autoInc {
			// serial = integer type + sequence default: the sequence is gone.
			out = append(out, SchemaIssue{Kind: ColumnTypeMismatch, Table: exp.name, Object: c.name, Expected: c.rawType,
				Actual: lc.typ + " (no sequence default or identity)",
				Fix: fmt.Sprintf("ALTER TABLE %s ALTER COLUMN \"%s\" ADD GENERATED BY DEFAULT AS IDENTITY;\n"+
					"SELECT setval(pg_get_serial_sequence('%s', '%s'), COALESCE(MAX(\"%s\"), 0) + 1, false) FROM %s;",
					qt, c.name, qt, c.name, c.name, qt)})
		}
		if s.normType(lc.typ) != c.typ {
			fix := fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" TYPE %s USING "%s"::%s`, qt, c.name, c.typ, c.name, c.typ)
			if s.dialect == SQLite {
				fix = sqliteRebuild(exp.name, fmt.Sprintf("declare %s as %s", c.name, c.rawType))
			}
			out = append(out, SchemaIssue{Kind: ColumnTypeMismatch, Table: exp.name, Object: c.name, Expected: c.rawType, Actual: lc.typ, Fix: fix})
		}
		if lc.notNull != c.notNull {
			e, a, op := "NOT NULL", "NULL", "SET NOT NULL"
			if !c.notNull {
				e, a, op = "NULL", "NOT NULL", "DROP NOT NULL"
			}
			fix := fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" %s`, qt, c.name, op)
			if s.dialect == SQLite {
				fix = sqliteRebuild(exp.name, fmt.Sprintf("declare %s %s", c.name, e))
			}
			out = append(out, SchemaIssue{Kind: NullabilityMismatch, Table: exp.name, Object: c.name, Expected: e, Actual: a, Fix: fix})
		}
	}
	if !slices.Equal(exp.pk, lt.pk) {
		out = append(out, SchemaIssue{Kind: PrimaryKeyMismatch, Table: exp.name, Object: "primary key",
			Expected: "(" + strings.Join(exp.pk, ", ") + ")", Actual: "(" + strings.Join(lt.pk, ", ") + ")",
			Fix: s.rebuildOr(exp.name, fmt.Sprintf(`ALTER TABLE %s ADD PRIMARY KEY ("%s")`, qt, strings.Join(exp.pk, `", "`)))})
	}
	for _, ei := range exp.indexes {
		li, ok := lt.indexes[ei.name]
		create := func() string {
			return s.fixSQL(db, func(m gorm.Migrator) error { return m.CreateIndex(exp.model, ei.name) })
		}
		if !ok {
			out = append(out, SchemaIssue{Kind: MissingIndex, Table: exp.name, Object: ei.name, Expected: describeIndex(ei.unique, ei.cols, ei.where), Fix: create()})
			continue
		}
		if li.unique != ei.unique || !slices.Equal(li.cols, ei.cols) || normPredicate(li.where) != normPredicate(ei.where) {
			out = append(out, SchemaIssue{Kind: IndexMismatch, Table: exp.name, Object: ei.name,
				Expected: describeIndex(ei.unique, ei.cols, ei.where), Actual: describeIndex(li.unique, li.cols, li.where),
				Fix: fmt.Sprintf("DROP INDEX %s;\n%s", s.quotedIndex(ei.name), create())})
		}
	}
	for _, fk := range exp.fks {
		want := describeFK(fk.cols, fk.refTable, fk.refCols, fk.onDelete)
		var found *liveFK
		for i := range lt.fks {
			l := &lt.fks[i]
			byName := s.dialect == Postgres && l.name == fk.name
			byShape := slices.Equal(l.cols, fk.cols) && l.refTable == fk.refTable
			if byName || (found == nil && byShape) {
				found = l
			}
		}
		addFix := func() string {
			if s.dialect == SQLite {
				return sqliteRebuild(exp.name, "add the foreign key "+want)
			}
			return s.fixSQL(db, func(m gorm.Migrator) error { return m.CreateConstraint(exp.model, fk.name) })
		}
		if found == nil {
			out = append(out, SchemaIssue{Kind: MissingForeignKey, Table: exp.name, Object: fk.name, Expected: want, Fix: addFix()})
			continue
		}
		if !slices.Equal(found.cols, fk.cols) || found.refTable != fk.refTable || !slices.Equal(found.refCols, fk.refCols) ||
			normAction(found.onDelete) != normAction(fk.onDelete) {
			fix := addFix()
			if s.dialect == Postgres {
				fix = fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT \"%s\";\n%s", qt, found.name, fix)
			}
			out = append(out, SchemaIssue{Kind: ForeignKeyMismatch, Table: exp.name, Object: fk.name, Expected: want,
				Actual: describeFK(found.cols, found.refTable, found.refCols, found.onDelete), Fix: fix})
		}
	}
	return out
}

func describeIndex(unique bool, cols []string, where string) string {
	d := "(" + strings.Join(cols, ", ") + ")"
	if unique {
		d = "UNIQUE " + d
	}
	if where != "" {
		d += " WHERE " + where
	}
	return d
}

func describeFK(cols []string, refTable string, refCols []string, onDelete string) string {
	return fmt.Sprintf("(%s) REFERENCES %s(%s) ON DELETE %s", strings.Join(cols, ", "), refTable, strings.Join(refCols, ", "), normAction(onDelete))
}

func normAction(a string) string {
	a = strings.ToUpper(strings.TrimSpace(a))
	if a == "" {
		return "NO ACTION"
	}
	return a
}

func sqliteRebuild(table, what string) string {
	return fmt.Sprintf("SQLite cannot alter this in place: rebuild %s to %s (create it from `agentstore ddl --dialect sqlite` under a new name, copy the rows, drop the old table, rename)", table, what)
}

// rebuildOr returns fix on PostgreSQL and the SQLite table-rebuild advice on SQLite.
func (s *Store) rebuildOr(table, fix string) string {
	if s.dialect == SQLite {
		return sqliteRebuild(table, "the model's definition")
	}
	return fix
}

func (s *Store) quotedIndex(name string) string {
	if s.cfg.schema != "" {
		return `"` + s.cfg.schema + `"."` + name + `"`
	}
	return `"` + name + `"`
}

// fixSQL renders the statements fn would execute, by running it on a
// dry-run session of the handle Migrate uses (so a suggested CREATE TABLE
// is the one DDL and Migrate produce).
func (s *Store) fixSQL(db *gorm.DB, fn func(m gorm.Migrator) error) (fix string) {
	const fallback = "run `agentstore migrate` (Store.Migrate)"
	defer func() {
		if recover() != nil { // a dialect's dry run may not support every statement
			fix = fallback
		}
	}()
	mdb, err := s.migrationDB()
	if err != nil {
		return fallback
	}
	rec := &ddlLogger{Interface: s.cfg.logger}
	tx := mdb.Session(&gorm.Session{DryRun: true, Logger: rec, NewDB: true, Context: db.Statement.Context})
	if err := fn(tx.Migrator()); err != nil {
		return fallback
	}
	var out []string
	for _, st := range orderDDL(rec.stmts, s.dialect) {
		out = append(out, st+";")
	}
	if len(out) == 0 {
		return fallback
	}
	return strings.Join(out, "\n")
}

var (
	reSpaces     = regexp.MustCompile(`\s+`)
	reTZ         = regexp.MustCompile(`^(timestamp|time)(\(\d+\))? with time zone$`)
	reNoTZ       = regexp.MustCompile(`^(timestamp|time)(\(\d+\))? without time zone$`)
	reParenSpace = regexp.MustCompile(`\s*([(),])\s*`)
)

// normType normalises a column type so the model's spelling and the
// catalog's compare equal: on PostgreSQL "character varying(32)" is
// "varchar(32)", "timestamp(6) with time zone" is "timestamptz(6)" (and a
// bare timestamptz has precision 6), serial types are their integer types;
// on SQLite the declared type is compared case-insensitively, without the
// "PRIMARY KEY AUTOINCREMENT" GORM puts in the type.
func (s *Store) normType(t string) string {
	t = strings.ToLower(strings.TrimSpace(reSpaces.ReplaceAllString(t, " ")))
	if s.dialect == SQLite {
		return strings.TrimSpace(strings.TrimSuffix(reParenSpace.ReplaceAllString(t, "$1"), "primary key autoincrement"))
	}
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

// normPredicate normalises a partial-index predicate for comparison:
// PostgreSQL stores "(expires_at IS NOT NULL)" and adds casts, the model
// says "expires_at IS NOT NULL". Parentheses, quotes, casts, case and
// spacing are ignored.
func normPredicate(p string) string {
	p = strings.ToLower(reSpaces.ReplaceAllString(p, " "))
	p = reCast.ReplaceAllString(p, "")
	p = strings.NewReplacer("(", "", ")", "", `"`, "", "`", "").Replace(p)
	return strings.TrimSpace(reSpaces.ReplaceAllString(p, " "))
}

// reCast matches the casts PostgreSQL adds when it stores a predicate
// ("(status)::text = 'draft'::text").
var reCast = regexp.MustCompile(`::(character varying|double precision|timestamp(\(\d+\))? with(out)? time zone|[a-z_][a-z0-9_]*)(\(\d+(,\d+)?\))?(\[\])?`)

// live* describe a table as the database catalog reports it.
type liveColumn struct {
	typ     string
	notNull bool
	// autoInc: PostgreSQL column with a sequence default or identity (always true on SQLite).
	autoInc bool
}

type liveIndex struct {
	unique bool
	where  string
	cols   []string
}

type liveFK struct {
	name     string
	cols     []string
	refTable string
	refCols  []string
	onDelete string
}

type liveTable struct {
	cols    map[string]liveColumn
	pk      []string
	indexes map[string]liveIndex
	fks     []liveFK
}

func newLiveTable() *liveTable {
	return &liveTable{cols: map[string]liveColumn{}, indexes: map[string]liveIndex{}}
}

// loadPostgresCatalog reads tables, columns, indexes and foreign keys of
// schema nsp from pg_catalog.
func loadPostgresCatalog(db *gorm.DB, nsp string) (map[string]*liveTable, error) {
	tables := map[string]*liveTable{}
	var cols []struct {
		Tbl, Col, Typ    string
		NotNull, AutoInc bool
	}
	if err := db.Raw(`SELECT c.relname AS tbl, a.attname AS col, format_type(a.atttypid, a.atttypmod) AS typ, a.attnotnull AS not_null,
			(a.attidentity <> '' OR COALESCE(pg_get_expr(d.adbin, d.adrelid), '') LIKE 'nextval(%') AS auto_inc
		FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE n.nspname = ? AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY c.relname, a.attnum`, nsp).Scan(&cols).Error; err != nil {
		return nil, fmt.Errorf("read columns of schema %s: %w", nsp, err)
	}
	for _, c := range cols {
		t := tables[c.Tbl]
		if t == nil {
			t = newLiveTable()
			tables[c.Tbl] = t
		}
		t.cols[c.Col] = liveColumn{typ: c.Typ, notNull: c.NotNull, autoInc: c.AutoInc}
	}
	var idx []struct {
		Tbl, Idx          string
		IsUnique, Primary bool
		Pred, Cols        string
	}
	if err := db.Raw(`SELECT t.relname AS tbl, i.relname AS idx, x.indisunique AS is_unique, x.indisprimary AS "primary",
			COALESCE(pg_get_expr(x.indpred, x.indrelid), '') AS pred,
			COALESCE((SELECT string_agg(COALESCE(a.attname, '-') ||
					CASE WHEN ((x.indoption::int2[])[k.ord - 1] & 1) = 1 THEN ' DESC' ELSE '' END, ',' ORDER BY k.ord)
				FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
				LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum), '') AS cols
		FROM pg_catalog.pg_index x
		JOIN pg_catalog.pg_class t ON t.oid = x.indrelid
		JOIN pg_catalog.pg_class i ON i.oid = x.indexrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = ?`, nsp).Scan(&idx).Error; err != nil {
		return nil, fmt.Errorf("read indexes of schema %s: %w", nsp, err)
	}
	for _, r := range idx {
		t := tables[r.Tbl]
		if t == nil {
			continue
		}
		cs := splitList(r.Cols)
		if r.Primary {
			t.pk = cs
		}
		t.indexes[r.Idx] = liveIndex{unique: r.IsUnique, where: r.Pred, cols: cs}
	}
	var fks []struct {
		Tbl, Name, RefTbl, OnDel, Cols, RefCols string
	}
	if err := db.Raw(`SELECT t.relname AS tbl, con.conname AS name, rt.relname AS ref_tbl,
			CASE con.confdeltype WHEN 'c' THEN 'CASCADE' WHEN 'n' THEN 'SET NULL' WHEN 'd' THEN 'SET DEFAULT'
				WHEN 'r' THEN 'RESTRICT' ELSE 'NO ACTION' END AS on_del,
			(SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum) AS cols,
			(SELECT string_agg(a.attname, ',' ORDER BY k.ord) FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
				JOIN pg_catalog.pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum) AS ref_cols
		FROM pg_catalog.pg_constraint con
		JOIN pg_catalog.pg_class t ON t.oid = con.conrelid
		JOIN pg_catalog.pg_class rt ON rt.oid = con.confrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = t.relnamespace
		JOIN pg_catalog.pg_namespace rn ON rn.oid = rt.relnamespace
		WHERE con.contype = 'f' AND n.nspname = ? AND rn.nspname = ?`, nsp, nsp).Scan(&fks).Error; err != nil {
		return nil, fmt.Errorf("read foreign keys of schema %s: %w", nsp, err)
	}
	for _, r := range fks {
		if t := tables[r.Tbl]; t != nil {
			t.fks = append(t.fks, liveFK{name: r.Name, cols: splitList(r.Cols), refTable: r.RefTbl, refCols: splitList(r.RefCols), onDelete: r.OnDel})
		}
	}
	return tables, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

var reWhere = regexp.MustCompile(`(?is)\bWHERE\b(.*)$`)

// loadSQLiteCatalog reads tables, columns, indexes and foreign keys of the
// main database through the pragma table-valued functions.
func loadSQLiteCatalog(db *gorm.DB) (map[string]*liveTable, error) {
	var names []string
	if err := db.Raw(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`).
		Scan(&names).Error; err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	tables := map[string]*liveTable{}
	for _, name := range names {
		t := newLiveTable()
		tables[name] = t
		var cols []struct {
			Name, Type string
			NotNull    int
			PK         int
		}
		if err := db.Raw(`SELECT name, type, "notnull" AS not_null, pk FROM pragma_table_info(?) ORDER BY cid`, name).Scan(&cols).Error; err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", name, err)
		}
		pk := map[int]string{}
		for _, c := range cols {
			t.cols[c.Name] = liveColumn{typ: c.Type, notNull: c.NotNull != 0, autoInc: true}
			if c.PK > 0 {
				pk[c.PK] = c.Name
			}
		}
		for i := 1; i <= len(pk); i++ {
			t.pk = append(t.pk, pk[i])
		}
		var idx []struct {
			Name   string
			Unique int
			SQL    *string
		}
		if err := db.Raw(`SELECT l.name AS name, l."unique" AS "unique", m.sql AS sql FROM pragma_index_list(?) AS l
			LEFT JOIN sqlite_master AS m ON m.type = 'index' AND m.name = l.name`, name).Scan(&idx).Error; err != nil {
			return nil, fmt.Errorf("read indexes of %s: %w", name, err)
		}
		for _, ix := range idx {
			var ic []struct {
				Name *string
				Desc int
			}
			if err := db.Raw(`SELECT name, "desc" AS "desc" FROM pragma_index_xinfo(?) WHERE "key" = 1 ORDER BY seqno`, ix.Name).
				Scan(&ic).Error; err != nil {
				return nil, fmt.Errorf("read index %s: %w", ix.Name, err)
			}
			li := liveIndex{unique: ix.Unique != 0}
			for _, c := range ic {
				col := "-"
				if c.Name != nil {
					col = *c.Name
				}
				if c.Desc != 0 {
					col += " DESC"
				}
				li.cols = append(li.cols, col)
			}
			if ix.SQL != nil {
				if m := reWhere.FindStringSubmatch(*ix.SQL); m != nil {
					li.where = strings.TrimSpace(m[1])
				}
			}
			t.indexes[ix.Name] = li
		}
		var fks []struct {
			ID, Seq         int
			Table, From, To string
			OnDelete        string
		}
		if err := db.Raw(`SELECT id, seq, "table", "from", "to", on_delete FROM pragma_foreign_key_list(?) ORDER BY id, seq`, name).
			Scan(&fks).Error; err != nil {
			return nil, fmt.Errorf("read foreign keys of %s: %w", name, err)
		}
		byID := map[int]int{}
		for _, f := range fks {
			i, ok := byID[f.ID]
			if !ok {
				i = len(t.fks)
				byID[f.ID] = i
				t.fks = append(t.fks, liveFK{refTable: f.Table, onDelete: f.OnDelete})
			}
			t.fks[i].cols = append(t.fks[i].cols, f.From)
			t.fks[i].refCols = append(t.fks[i].refCols, f.To)
		}
	}
	return tables, nil
}
