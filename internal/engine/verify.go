package engine

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// IssueKind and SchemaIssue are the dialect contract's (a dialect's
// catalog reports connection-level issues).
type (
	IssueKind   = dialect.IssueKind
	SchemaIssue = dialect.SchemaIssue
)

// The kinds of issue Verify reports.
const (
	IssueMissingTable        = dialect.IssueMissingTable
	IssueMissingColumn       = dialect.IssueMissingColumn
	IssueColumnTypeMismatch  = dialect.IssueColumnTypeMismatch
	IssueNullabilityMismatch = dialect.IssueNullabilityMismatch
	IssuePrimaryKeyMismatch  = dialect.IssuePrimaryKeyMismatch
	IssueMissingIndex        = dialect.IssueMissingIndex
	IssueIndexMismatch       = dialect.IssueIndexMismatch
	IssueMissingForeignKey   = dialect.IssueMissingForeignKey
	IssueForeignKeyMismatch  = dialect.IssueForeignKeyMismatch
	IssueSchemaVersionBehind = dialect.IssueSchemaVersionBehind
	IssueSchemaVersionAhead  = dialect.IssueSchemaVersionAhead
	IssueForeignKeysDisabled = dialect.IssueForeignKeysDisabled
	IssueExtraColumn         = dialect.IssueExtraColumn
	IssueExtraIndex          = dialect.IssueExtraIndex
	IssueDefaultMismatch     = dialect.IssueDefaultMismatch
	IssueInvalidIndex        = dialect.IssueInvalidIndex
)

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
	// Read the whole catalog from one snapshot where the database has
	// snapshot reads (not SQLite: its transactions take the write lock).
	var (
		rep  *VerifyReport
		ierr error
	)
	err := s.readTx(db, func(tx *gorm.DB) error {
		rep, ierr = s.inspect(tx)
		return ierr
	})
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
	rep := &VerifyReport{Dialect: s.Dialect(), Prefix: s.cfg.Prefix, ExpectedVersion: SchemaVersion, Issues: []SchemaIssue{}}
	var (
		live map[string]*dialect.LiveTable
		err  error
	)
	cat := s.d.Catalog()
	nsp, err := cat.SchemaName(db, s.cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep.Schema = nsp
	exps, names, err := s.expectedTables(false)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	live, err = cat.Load(db, nsp, names)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", translateError(err))
	}
	for _, exp := range exps {
		rep.Tables++
		rep.Issues = append(rep.Issues, s.compareTable(db, exp, live[exp.name])...)
	}
	si, err := s.searchIssues(db, nsp, live)
	if err != nil {
		return nil, err
	}
	rep.Issues = append(rep.Issues, si...)
	fi, err := s.feedIssues(db, nsp, live)
	if err != nil {
		return nil, err
	}
	rep.Issues = append(rep.Issues, fi...)
	conn, err := cat.ConnectionIssues(db)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", translateError(err))
	}
	rep.Issues = append(rep.Issues, conn...)
	if vt := live[s.cfg.Prefix+models.TableSchemaVersion]; vt != nil && vt.Cols["version"].Type != "" {
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
			rep.Issues = append(rep.Issues, SchemaIssue{Kind: IssueSchemaVersionBehind, Table: s.cfg.Prefix + models.TableSchemaVersion,
				Object: "version", Expected: fmt.Sprint(SchemaVersion), Actual: actual,
				Fix: fmt.Sprintf("run `agentstore migrate` (Store.Migrate) or apply the Flyway migrations up to V%d", SchemaVersion)})
		case rep.DatabaseVersion > SchemaVersion:
			rep.Issues = append(rep.Issues, SchemaIssue{Kind: IssueSchemaVersionAhead, Table: s.cfg.Prefix + models.TableSchemaVersion,
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

// expectedTables returns what the models of both domains require, in
// models.All() order, and the (unqualified, prefixed) table names. With
// indexesOnly, each table has its name, model and indexes only (what
// Migrate's index check at head compares).
func (s *Store) expectedTables(indexesOnly bool) ([]*expectedTable, []string, error) {
	all := models.All()
	exps := make([]*expectedTable, 0, len(all))
	names := make([]string, 0, len(all))
	for _, m := range all {
		exp, err := s.expectedTable(m, indexesOnly)
		if err != nil {
			return nil, nil, err
		}
		exps = append(exps, exp)
		names = append(names, exp.name)
	}
	return exps, names, nil
}

// expectedTable parses model m with the store's GORM handle (so its naming
// strategy and dialect apply) into the columns, keys and indexes it needs
// (with indexesOnly, the indexes alone).
func (s *Store) expectedTable(m any, indexesOnly bool) (*expectedTable, error) {
	stmt := &gorm.Statement{DB: s.db}
	if err := stmt.Parse(m); err != nil {
		return nil, fmt.Errorf("parse model %T: %w", m, err)
	}
	sch := stmt.Schema
	t := &expectedTable{model: m, name: s.unqualify(sch.Table)}
	if !indexesOnly {
		if err := s.expectColumnsAndKeys(t, sch); err != nil {
			return nil, err
		}
	}
	for _, idx := range sch.ParseIndexes() {
		ei := expectedIndex{name: idx.Name, unique: strings.EqualFold(idx.Class, "UNIQUE"), where: idx.Where}
		if !s.has(CapPartialIndexes) {
			// the dialect builds a full index (or, for a unique one, a
			// generated column its catalog reports as the indexed column)
			ei.where = ""
		}
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
	if _, ok := s.d.(dialect.ChangeFeedIDOrder); ok && strings.TrimPrefix(t.name, s.cfg.Prefix) == models.TableSessionChanges {
		// V19: that feed is read in id order, without the (ord, id) index.
		t.indexes = slices.DeleteFunc(t.indexes, func(ei expectedIndex) bool { return slices.Equal(ei.cols, []string{"ord", "id"}) })
	}
	return t, nil
}

// expectColumnsAndKeys fills t's columns, primary key and foreign keys
// from the parsed model sch.
func (s *Store) expectColumnsAndKeys(t *expectedTable, sch *schema.Schema) error {
	mig, ok := s.db.Migrator().(interface{ DataTypeOf(*schema.Field) string })
	if !ok {
		return fmt.Errorf("the %s migrator cannot report column types", s.Dialect())
	}
	for _, dbName := range sch.DBNames {
		f := sch.FieldsByDBName[dbName]
		if f.IgnoreMigration {
			continue
		}
		raw := mig.DataTypeOf(f)
		// A primary-key column is NOT NULL in some catalogs (PostgreSQL)
		// whatever it declares; others (SQLite) report only the declared
		// constraint.
		notNull := f.NotNull || (f.PrimaryKey && s.d.Catalog().PKNotNull())
		t.cols = append(t.cols, expectedColumn{name: dbName, typ: s.normType(raw), rawType: raw, notNull: notNull, field: f})
	}
	for _, f := range sch.PrimaryFields {
		t.pk = append(t.pk, f.DBName)
	}
	// As GORM's CreateTable: a key column whose type carries the key
	// itself (SQLite's "integer PRIMARY KEY AUTOINCREMENT": a composite
	// key cannot auto-increment there) is the table's whole primary key.
	for _, f := range sch.PrimaryFields {
		if strings.Contains(strings.ToUpper(mig.DataTypeOf(f)), "PRIMARY KEY") {
			t.pk = []string{f.DBName}
			break
		}
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
	return nil
}

// unqualify drops the store's schema from a table name.
func (s *Store) unqualify(table string) string {
	if s.cfg.Schema != "" {
		return strings.TrimPrefix(table, s.cfg.Schema+".")
	}
	return table
}

// compareTable lists the differences between exp and the live table lt (nil = missing).
func (s *Store) compareTable(db *gorm.DB, exp *expectedTable, lt *dialect.LiveTable) []SchemaIssue {
	if lt == nil {
		return []SchemaIssue{{Kind: IssueMissingTable, Table: exp.name, Fix: s.fixSQL(db, func(m gorm.Migrator) error { return m.CreateTable(exp.model) })}}
	}
	var out []SchemaIssue
	qt := s.quoted(strings.TrimPrefix(exp.name, s.cfg.Prefix))
	// A dialect that restates a column's whole definition to change it
	// (dialect.SchemaFixer: MariaDB's MODIFY COLUMN) gets the model's.
	var redefine func(c expectedColumn) string
	if sf, ok := s.d.(dialect.SchemaFixer); ok {
		redefine = func(c expectedColumn) string {
			return sf.RedefineColumnSQL(qt, c.name, s.db.Migrator().FullDataTypeOf(c.field).SQL)
		}
	}
	for _, c := range exp.cols {
		lc, ok := lt.Cols[c.name]
		if !ok {
			var fix string
			if !s.has(CapAlterColumns) && c.field.NotNull && !c.field.HasDefaultValue {
				// Such a database (SQLite) cannot add a NOT NULL column without a default.
				fix = s.rebuildAdvice(exp.name, "add "+c.name+" "+c.rawType+" NOT NULL")
			} else {
				fix = s.fixSQL(db, func(m gorm.Migrator) error { return m.AddColumn(exp.model, c.field.Name) })
			}
			out = append(out, SchemaIssue{Kind: IssueMissingColumn, Table: exp.name, Object: c.name, Expected: c.rawType, Fix: fix})
			continue
		}
		if s.normType(lc.Type) == c.typ && c.field.AutoIncrement && !lc.AutoInc {
			// serial = integer type + sequence default: the sequence is gone.
			fix := fmt.Sprintf("ALTER TABLE %s ALTER COLUMN \"%s\" ADD GENERATED BY DEFAULT AS IDENTITY;\n"+
				"SELECT setval(pg_get_serial_sequence('%s', '%s'), COALESCE(MAX(\"%s\"), 0) + 1, false) FROM %s;",
				qt, c.name, qt, c.name, c.name, qt)
			if redefine != nil {
				fix = redefine(c)
			}
			out = append(out, SchemaIssue{Kind: IssueColumnTypeMismatch, Table: exp.name, Object: c.name, Expected: c.rawType,
				Actual: lc.Type + " (no sequence default or identity)", Fix: fix})
		}
		if s.normType(lc.Type) != c.typ {
			fix := fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" TYPE %s USING "%s"::%s`, qt, c.name, c.typ, c.name, c.typ)
			if redefine != nil {
				fix = redefine(c)
			}
			if !s.has(CapAlterColumns) {
				fix = s.rebuildAdvice(exp.name, fmt.Sprintf("declare %s as %s", c.name, c.rawType))
			}
			out = append(out, SchemaIssue{Kind: IssueColumnTypeMismatch, Table: exp.name, Object: c.name, Expected: c.rawType, Actual: lc.Type, Fix: fix})
		}
		if lc.NotNull != c.notNull {
			e, a, op := "NOT NULL", "NULL", "SET NOT NULL"
			if !c.notNull {
				e, a, op = "NULL", "NOT NULL", "DROP NOT NULL"
			}
			fix := fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" %s`, qt, c.name, op)
			if redefine != nil {
				fix = redefine(c)
			}
			if !s.has(CapAlterColumns) {
				fix = s.rebuildAdvice(exp.name, fmt.Sprintf("declare %s %s", c.name, e))
			}
			out = append(out, SchemaIssue{Kind: IssueNullabilityMismatch, Table: exp.name, Object: c.name, Expected: e, Actual: a, Fix: fix})
		}
		if !c.field.AutoIncrement {
			want, got := expectedDefault(c.field), ""
			if lc.Default != nil {
				got = normDefault(*lc.Default)
			}
			if want != got {
				fix := fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" DROP DEFAULT`, qt, c.name)
				if want != "" {
					fix = fmt.Sprintf(`ALTER TABLE %s ALTER COLUMN "%s" SET DEFAULT %s`, qt, c.name, sqlLiteral(want))
				}
				if !s.has(CapAlterColumns) {
					fix = s.rebuildAdvice(exp.name, fmt.Sprintf("declare %s DEFAULT %s", c.name, orNone(want)))
				}
				out = append(out, SchemaIssue{Kind: IssueDefaultMismatch, Table: exp.name, Object: c.name,
					Expected: orNone(want), Actual: orNone(got), Fix: fix})
			}
		}
	}
	known := map[string]bool{}
	for _, c := range exp.cols {
		known[c.name] = true
	}
	searchCols, _ := s.searchExtras(exp.name) // the search index's (verify_search.go)
	for c := range searchCols {
		known[c] = true
	}
	for _, name := range sortedKeys(lt.Cols) {
		if !known[name] {
			out = append(out, SchemaIssue{Kind: IssueExtraColumn, Table: exp.name, Object: name, Actual: lt.Cols[name].Type,
				Fix: fmt.Sprintf(`ALTER TABLE %s DROP COLUMN "%s"`, qt, name)})
		}
	}
	if !slices.Equal(exp.pk, lt.PK) {
		out = append(out, SchemaIssue{Kind: IssuePrimaryKeyMismatch, Table: exp.name, Object: "primary key",
			Expected: "(" + strings.Join(exp.pk, ", ") + ")", Actual: "(" + strings.Join(lt.PK, ", ") + ")",
			Fix: s.rebuildOr(exp.name, fmt.Sprintf(`ALTER TABLE %s ADD PRIMARY KEY ("%s")`, qt, strings.Join(exp.pk, `", "`)))})
	}
	out = append(out, s.indexIssues(db, exp, lt)...)
	for _, fk := range exp.fks {
		want := describeFK(fk.cols, fk.refTable, fk.refCols, fk.onDelete)
		var found *dialect.LiveFK
		for i := range lt.FKs {
			l := &lt.FKs[i]
			byName := s.d.Catalog().NamedForeignKeys() && l.Name == fk.name
			byShape := slices.Equal(l.Cols, fk.cols) && l.RefTable == fk.refTable
			if byName || (found == nil && byShape) {
				found = l
			}
		}
		addFix := func() string {
			if !s.has(CapAlterColumns) {
				return s.rebuildAdvice(exp.name, "add the foreign key "+want)
			}
			return s.fixSQL(db, func(m gorm.Migrator) error { return m.CreateConstraint(exp.model, fk.name) })
		}
		if found == nil {
			out = append(out, SchemaIssue{Kind: IssueMissingForeignKey, Table: exp.name, Object: fk.name, Expected: want, Fix: addFix()})
			continue
		}
		if !slices.Equal(found.Cols, fk.cols) || found.RefTable != fk.refTable || !slices.Equal(found.RefCols, fk.refCols) ||
			normAction(found.OnDelete) != normAction(fk.onDelete) {
			fix := addFix()
			if s.has(CapAlterColumns) {
				drop := fmt.Sprintf("ALTER TABLE %s DROP CONSTRAINT \"%s\"", qt, found.Name)
				if sf, ok := s.d.(dialect.SchemaFixer); ok {
					drop = sf.DropForeignKeySQL(qt, found.Name)
				}
				fix = drop + ";\n" + fix
			}
			out = append(out, SchemaIssue{Kind: IssueForeignKeyMismatch, Table: exp.name, Object: fk.name, Expected: want,
				Actual: describeFK(found.Cols, found.RefTable, found.RefCols, found.OnDelete), Fix: fix})
		}
	}
	return out
}

// indexIssues lists the differences between the indexes exp declares and
// those of the live table lt: missing, INVALID and differently defined
// indexes, and indexes the models do not declare (not those backing a
// PRIMARY KEY or UNIQUE constraint).
func (s *Store) indexIssues(db *gorm.DB, exp *expectedTable, lt *dialect.LiveTable) []SchemaIssue {
	var out []SchemaIssue
	for _, ei := range exp.indexes {
		li, ok := lt.Indexes[ei.name]
		create := func() string {
			return s.fixSQL(db, func(m gorm.Migrator) error { return m.CreateIndex(exp.model, ei.name) })
		}
		if !ok {
			out = append(out, SchemaIssue{Kind: IssueMissingIndex, Table: exp.name, Object: ei.name, Expected: describeIndex(ei.unique, ei.cols, ei.where), Fix: create()})
			continue
		}
		if li.Invalid {
			out = append(out, SchemaIssue{Kind: IssueInvalidIndex, Table: exp.name, Object: ei.name,
				Expected: describeIndex(ei.unique, ei.cols, ei.where), Actual: "INVALID",
				Fix: s.dropIndexSQL(exp.name, ei.name) + ";\n" + create()})
			continue
		}
		if li.Unique != ei.unique || !slices.Equal(li.Cols, ei.cols) || (li.Where != ei.where && normPredicate(li.Where) != normPredicate(ei.where)) {
			out = append(out, SchemaIssue{Kind: IssueIndexMismatch, Table: exp.name, Object: ei.name,
				Expected: describeIndex(ei.unique, ei.cols, ei.where), Actual: describeIndex(li.Unique, li.Cols, li.Where),
				Fix: s.dropIndexSQL(exp.name, ei.name) + ";\n" + create()})
		}
	}
	declared := map[string]bool{}
	for _, ei := range exp.indexes {
		declared[ei.name] = true
	}
	_, searchIdx := s.searchExtras(exp.name) // the search index's (verify_search.go)
	for i := range searchIdx {
		declared[i] = true
	}
	for _, name := range sortedKeys(lt.Indexes) {
		if li := lt.Indexes[name]; !declared[name] && !li.Constraint {
			out = append(out, SchemaIssue{Kind: IssueExtraIndex, Table: exp.name, Object: name,
				Actual: describeIndex(li.Unique, li.Cols, li.Where), Fix: s.dropIndexSQL(exp.name, name)})
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

// rebuildAdvice is the fix on a database that cannot alter a table in
// place (without CapAlterColumns): rebuild it.
func (s *Store) rebuildAdvice(table, what string) string {
	return fmt.Sprintf("%s cannot alter this in place: rebuild %s to %s (create it from `agentstore ddl --dialect %s` under a new name, copy the rows, drop the old table, rename)",
		s.d.Title(), table, what, s.d.Name())
}

// rebuildOr returns fix where tables alter in place, the rebuild advice elsewhere.
func (s *Store) rebuildOr(table, fix string) string {
	if !s.has(CapAlterColumns) {
		return s.rebuildAdvice(table, "the model's definition")
	}
	return fix
}

// dropIndexSQL is the statement that drops index name of table (its
// unqualified, prefixed name).
func (s *Store) dropIndexSQL(table, name string) string {
	if sf, ok := s.d.(dialect.SchemaFixer); ok {
		return sf.DropIndexSQL(s.quoted(strings.TrimPrefix(table, s.cfg.Prefix)), s.quotedIndex(name))
	}
	return "DROP INDEX " + s.quotedIndex(name)
}

func (s *Store) quotedIndex(name string) string {
	if s.cfg.Schema != "" {
		return `"` + s.cfg.Schema + `"."` + name + `"`
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
	rec := &ddlLogger{Interface: s.cfg.Logger}
	tx := mdb.Session(&gorm.Session{DryRun: true, Logger: rec, NewDB: true, Context: db.Statement.Context})
	if err := fn(tx.Migrator()); err != nil {
		return fallback
	}
	var out []string
	for _, st := range orderDDL(rec.stmts) {
		if st = normalizeModelDDL(s.d, st, s.quoted(models.TableSessionChanges)); st != "" {
			out = append(out, st+";")
		}
	}
	if len(out) == 0 {
		return fallback
	}
	return strings.Join(out, "\n")
}

// reSpaces matches a run of white space.
var reSpaces = regexp.MustCompile(`\s+`)

// normType normalises a column type so the model's spelling and the
// catalog's compare equal: white space collapsed and lower case here, the
// rest by the dialect's catalog (NormType: on PostgreSQL "character
// varying(32)" is "varchar(32)", "timestamp(6) with time zone" is
// "timestamptz(6)"; on SQLite without the "PRIMARY KEY AUTOINCREMENT" GORM
// puts in the type).
func (s *Store) normType(t string) string {
	t = strings.ToLower(strings.TrimSpace(reSpaces.ReplaceAllString(t, " ")))
	return s.d.Catalog().NormType(t)
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

// expectedDefault is the model's DEFAULT for f, normalised ("" = none).
func expectedDefault(f *schema.Field) string {
	if !f.HasDefaultValue || f.DefaultValue == "" {
		return ""
	}
	return normDefault(f.DefaultValue)
}

// normDefault normalises a DEFAULT expression for comparison: casts
// ('main'::character varying), enclosing parentheses and one level of
// quotes are dropped, booleans are lower-cased.
func normDefault(d string) string {
	d = strings.TrimSpace(d)
	for strings.HasPrefix(d, "(") && strings.HasSuffix(d, ")") {
		d = strings.TrimSpace(d[1 : len(d)-1])
	}
	d = reCast.ReplaceAllString(d, "")
	if len(d) >= 2 && (d[0] == '\'' && d[len(d)-1] == '\'' || d[0] == '"' && d[len(d)-1] == '"') {
		q := d[:1]
		d = strings.ReplaceAll(d[1:len(d)-1], q+q, q)
	}
	if strings.EqualFold(d, "true") || strings.EqualFold(d, "false") {
		d = strings.ToLower(d)
	}
	return d
}

// sqlLiteral quotes a normalised default for SQL (numbers and booleans bare).
func sqlLiteral(v string) string {
	if v == "true" || v == "false" || reNumber.MatchString(v) {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

var reNumber = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

func orNone(v string) string {
	if v == "" {
		return "(none)"
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
