package mariadb

import (
	"fmt"
	"slices"
	"strings"

	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
)

// MariaDB catalog reading for Verify and Migrate's index check:
// information_schema of the connection's database (DATABASE()).

// mdCatalog implements dialect.Catalog for MariaDB.
type mdCatalog struct{}

func (mdDialect) Catalog() dialect.Catalog { return mdCatalog{} }

// generatedIndexColumns maps the generated columns that stand in for a
// partial index's predicate to the column the models index: the
// one-active-plan rule is a UNIQUE index over active_session_id
// (session_id while the plan is draft, approved or executing, else NULL).
func generatedIndexColumn(col string) (string, bool) {
	if col == "active_session_id" {
		return "session_id", true
	}
	return "", false
}

// queueLiveIndex ends the name of the session queue's live-items index,
// which the models declare (session_id, priority DESC, seq) WHERE
// processed_at IS NULL and the chain (V17) creates as (session_id,
// processed_at, priority DESC, seq): the predicate's column second, so the
// live items are one range of the index in the claim's order.
const queueLiveIndex = "_queue_session_status"

// liveIndexCols returns the columns of the live-items index as the models
// declare them: without processed_at when it is second (the chain's form),
// else marked, so that Verify reports the index (one made before V17, or
// by hand) and its fix makes the chain's form.
func liveIndexCols(cols []string) []string {
	if len(cols) >= 2 && cols[1] == "processed_at" {
		return append(cols[:1:1], cols[2:]...)
	}
	out := append([]string(nil), cols...)
	if len(out) > 0 {
		out[0] += " (processed_at not second)"
	}
	return out
}

// SchemaName: the database the connection uses ("" is not possible: the
// DSN names one).
func (mdCatalog) SchemaName(db *gorm.DB, configured string) (string, error) {
	var cur *string
	if err := db.Raw("SELECT DATABASE()").Scan(&cur).Error; err != nil {
		return "", fmt.Errorf("read current database: %w", err)
	}
	if cur == nil || *cur == "" {
		return "", fmt.Errorf("the connection has no current database: name one in the DSN")
	}
	return *cur, nil
}

func inList(names []string) (string, []any) {
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	return "(" + strings.TrimSuffix(strings.Repeat("?,", len(names)), ",") + ")", args
}

func (c mdCatalog) Load(db *gorm.DB, nsp string, names []string) (map[string]*dialect.LiveTable, error) {
	tables := map[string]*dialect.LiveTable{}
	if len(names) == 0 {
		return tables, nil
	}
	in, args := inList(names)
	var cols []struct {
		TableName, ColumnName, ColumnType, IsNullable, Extra string
		ColumnDefault                                        *string
	}
	if err := db.Raw(`SELECT table_name AS table_name, column_name AS column_name, column_type AS column_type, is_nullable AS is_nullable,
		extra AS extra, column_default AS column_default FROM information_schema.columns WHERE table_schema = ? AND table_name IN `+in+
		` ORDER BY table_name, ordinal_position`, append([]any{nsp}, args...)...).Scan(&cols).Error; err != nil {
		return nil, fmt.Errorf("read columns: %w", err)
	}
	for _, col := range cols {
		if _, gen := generatedIndexColumn(col.ColumnName); gen {
			continue // the partial-index stand-in, not a model column
		}
		t := tables[col.TableName]
		if t == nil {
			t = dialect.NewLiveTable()
			tables[col.TableName] = t
		}
		def := col.ColumnDefault
		if def != nil && (*def == "NULL") {
			def = nil
		}
		if def != nil && isBoolType(col.ColumnType) {
			// a boolean's DEFAULT false is stored as 0
			switch *def {
			case "0":
				def = ptr("false")
			case "1":
				def = ptr("true")
			}
		}
		t.Cols[col.ColumnName] = dialect.LiveColumn{Type: col.ColumnType, NotNull: col.IsNullable == "NO", Default: def,
			AutoInc: strings.Contains(col.Extra, "auto_increment")}
	}
	if err := loadIndexes(db, nsp, names, tables, false); err != nil {
		return nil, err
	}
	var fks []struct {
		ConstraintName, TableName, ColumnName, ReferencedTableName, ReferencedColumnName, DeleteRule string
	}
	if err := db.Raw(`SELECT k.constraint_name AS constraint_name, k.table_name AS table_name, k.column_name AS column_name,
		k.referenced_table_name AS referenced_table_name, k.referenced_column_name AS referenced_column_name, r.delete_rule AS delete_rule
		FROM information_schema.key_column_usage k JOIN information_schema.referential_constraints r
		ON r.constraint_schema = k.constraint_schema AND r.constraint_name = k.constraint_name AND r.table_name = k.table_name
		WHERE k.table_schema = ? AND k.table_name IN `+in+` AND k.referenced_table_name IS NOT NULL
		ORDER BY k.table_name, k.constraint_name, k.ordinal_position`, append([]any{nsp}, args...)...).Scan(&fks).Error; err != nil {
		return nil, fmt.Errorf("read foreign keys: %w", err)
	}
	for _, fk := range fks {
		t := tables[fk.TableName]
		if t == nil {
			continue
		}
		n := len(t.FKs)
		if n == 0 || t.FKs[n-1].Name != fk.ConstraintName {
			t.FKs = append(t.FKs, dialect.LiveFK{Name: fk.ConstraintName, RefTable: fk.ReferencedTableName, OnDelete: fk.DeleteRule})
			n++
		}
		t.FKs[n-1].Cols = append(t.FKs[n-1].Cols, fk.ColumnName)
		t.FKs[n-1].RefCols = append(t.FKs[n-1].RefCols, fk.ReferencedColumnName)
	}
	return tables, nil
}

// loadIndexes reads the indexes (and, with pk, the primary keys) of the
// named tables into tables, creating the entries of tables that exist.
func loadIndexes(db *gorm.DB, nsp string, names []string, tables map[string]*dialect.LiveTable, create bool) error {
	in, args := inList(names)
	var rows []struct {
		TableName, IndexName, ColumnName string
		NonUnique                        int
		Collation                        *string
	}
	if err := db.Raw(`SELECT table_name AS table_name, index_name AS index_name, column_name AS column_name, non_unique AS non_unique,
		collation AS collation FROM information_schema.statistics WHERE table_schema = ? AND table_name IN `+in+
		` ORDER BY table_name, index_name, seq_in_index`, append([]any{nsp}, args...)...).Scan(&rows).Error; err != nil {
		return fmt.Errorf("read indexes: %w", err)
	}
	for _, r := range rows {
		t := tables[r.TableName]
		if t == nil {
			t = dialect.NewLiveTable()
			tables[r.TableName] = t
		}
		if r.IndexName == "PRIMARY" {
			t.PK = append(t.PK, r.ColumnName)
			continue
		}
		col := r.ColumnName
		if m, ok := generatedIndexColumn(col); ok {
			col = m
		}
		li := t.Indexes[r.IndexName]
		if r.Collation != nil && *r.Collation == "D" {
			col += " DESC"
		}
		li.Unique = r.NonUnique == 0
		li.Cols = append(li.Cols, col)
		// a foreign key's own index (named after the constraint) is not one
		// of the models' indexes
		li.Constraint = strings.HasPrefix(r.IndexName, "fk_")
		t.Indexes[r.IndexName] = li
	}
	for name, t := range tables {
		for iname, li := range t.Indexes {
			switch {
			case isReadyIndex(name, iname):
				t.Indexes[iname] = readyModelIndex(li)
			case strings.HasSuffix(iname, queueLiveIndex):
				li.Cols = liveIndexCols(li.Cols)
				t.Indexes[iname] = li
			}
		}
	}
	return nil
}

// readyPredicateCols returns the columns that lead MariaDB's stand-in for the worker queue's
// partial index "ready" ((visible_at, id) WHERE session_id IS NULL AND tag
// IS NULL elsewhere; V18): the full index (session_id, tag, visible_at,
// id), whose range (NULL, NULL, ..now] is the plain claim's rows in its
// order. NormalizeDDL creates it so; the catalog reports it as the models'
// (visible_at, id).
func readyPredicateCols() []string { return []string{"session_id", "tag"} }

// isReadyIndex reports whether index iname of table is the worker queue's
// "ready" index (any table prefix).
func isReadyIndex(table, iname string) bool {
	return strings.HasSuffix(table, "worker_queue") && iname == "idx_"+table+"_ready"
}

// readyModelIndex returns the models' view of the live "ready" index li:
// the stand-in without its leading predicate columns; any other shape (a
// schema before V18: (visible_at, id) holding every row) as a full index,
// WHERE TRUE, which Verify finds different from the models' and rebuilds.
func readyModelIndex(li dialect.LiveIndex) dialect.LiveIndex {
	lead := readyPredicateCols()
	n := len(lead)
	if len(li.Cols) > n && slices.Equal(li.Cols[:n], lead) {
		li.Cols = slices.Clone(li.Cols[n:])
		return li
	}
	li.Where = "TRUE"
	return li
}

func (mdCatalog) LoadIndexes(db *gorm.DB, nsp string, names []string) (map[string]*dialect.LiveTable, error) {
	tables := map[string]*dialect.LiveTable{}
	if len(names) == 0 {
		return tables, nil
	}
	if err := loadIndexes(db, nsp, names, tables, true); err != nil {
		return nil, err
	}
	return tables, nil
}

func (mdCatalog) HasTable(db *gorm.DB, nsp, name string) (bool, error) {
	var n int64
	err := db.Raw(`SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = COALESCE(NULLIF(?, ''), DATABASE()) AND table_name = ?`,
		nsp, name).Scan(&n).Error
	return n > 0, err
}

// ConnectionIssues: a connection without ANSI_QUOTES would read "id" as a
// string; Open sets it on every connection, New checks it.
func (mdCatalog) ConnectionIssues(db *gorm.DB) ([]dialect.SchemaIssue, error) { return nil, nil }

func (mdCatalog) PKNotNull() bool { return true }

func (mdCatalog) NamedForeignKeys() bool { return true }

func ptr(s string) *string { return &s }

// isBoolType reports whether the catalog type t is a boolean (tinyint(1)).
func isBoolType(t string) bool { return strings.EqualFold(t, "tinyint(1)") }

// NormType: information_schema spells int types without display width in
// 10.11 ("bigint(20)" in older releases), booleans as tinyint(1); GORM's
// mysql types carry " NULL" (nullable times) and " AUTO_INCREMENT" (which
// Verify checks from the catalog's extra column).
func (mdCatalog) NormType(t string) string {
	t = strings.TrimSpace(t)
	t = strings.TrimSuffix(t, " auto_increment")
	t = strings.TrimSuffix(t, " null")
	for _, p := range []string{"bigint", "int", "smallint"} {
		if strings.HasPrefix(t, p+"(") && strings.HasSuffix(t, ")") {
			t = p
		}
	}
	switch t {
	case "tinyint(1)", "bool", "boolean":
		return "boolean"
	case "integer":
		return "int"
	}
	return t
}
