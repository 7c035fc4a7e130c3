package sqlite

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/agentstore/agentstore/internal/dialect"

	"gorm.io/gorm"
)

// SQLite catalog reading for Verify (sqlite_master and the pragma
// table-valued functions). Pure SQL: no driver import, so it builds
// without cgo too.

// liteCatalog implements dialect.Catalog for SQLite.
type liteCatalog struct{}

var reWhere = regexp.MustCompile(`(?is)\bWHERE\b(.*)$`)

// loadSQLiteCatalog reads tables, columns, indexes and foreign keys of the
// main database through the pragma table-valued functions.
func loadSQLiteCatalog(db *gorm.DB) (map[string]*dialect.LiveTable, error) {
	var names []string
	if err := db.Raw(`SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\' ORDER BY name`).
		Scan(&names).Error; err != nil {
		return nil, fmt.Errorf("list tables: %w", err)
	}
	tables := map[string]*dialect.LiveTable{}
	for _, name := range names {
		t := dialect.NewLiveTable()
		tables[name] = t
		var cols []struct {
			Name, Type string
			NotNull    int
			PK         int
			Dflt       *string
		}
		if err := db.Raw(`SELECT name, type, "notnull" AS not_null, pk, dflt_value AS dflt FROM pragma_table_info(?) ORDER BY cid`, name).Scan(&cols).Error; err != nil {
			return nil, fmt.Errorf("read columns of %s: %w", name, err)
		}
		pk := map[int]string{}
		for _, c := range cols {
			t.Cols[c.Name] = dialect.LiveColumn{Type: c.Type, NotNull: c.NotNull != 0, AutoInc: true, Default: c.Dflt}
			if c.PK > 0 {
				pk[c.PK] = c.Name
			}
		}
		for i := 1; i <= len(pk); i++ {
			t.PK = append(t.PK, pk[i])
		}
		var idx []struct {
			Name   string
			Unique int
			Origin string
			SQL    *string
		}
		if err := db.Raw(`SELECT l.name AS name, l."unique" AS "unique", l.origin AS origin, m.sql AS sql FROM pragma_index_list(?) AS l
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
			// origin "c": CREATE INDEX; "u"/"pk": a UNIQUE or PRIMARY KEY constraint
			li := dialect.LiveIndex{Unique: ix.Unique != 0, Constraint: ix.Origin != "c"}
			for _, c := range ic {
				col := "-"
				if c.Name != nil {
					col = *c.Name
				}
				if c.Desc != 0 {
					col += " DESC"
				}
				li.Cols = append(li.Cols, col)
			}
			if ix.SQL != nil {
				if m := reWhere.FindStringSubmatch(*ix.SQL); m != nil {
					li.Where = strings.TrimSpace(m[1])
				}
			}
			t.Indexes[ix.Name] = li
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
				i = len(t.FKs)
				byID[f.ID] = i
				t.FKs = append(t.FKs, dialect.LiveFK{RefTable: f.Table, OnDelete: f.OnDelete})
			}
			t.FKs[i].Cols = append(t.FKs[i].Cols, f.From)
			t.FKs[i].RefCols = append(t.FKs[i].RefCols, f.To)
		}
	}
	return tables, nil
}

// schemaName: SQLite has no schemas.
func (liteCatalog) SchemaName(*gorm.DB, string) (string, error) { return "", nil }

// load reads every table of the database (SQLite's catalog is small and
// holds no dead rows); Verify looks up the named ones.
func (liteCatalog) Load(db *gorm.DB, _ string, _ []string) (map[string]*dialect.LiveTable, error) {
	return loadSQLiteCatalog(db)
}

// loadIndexes reads the indexes of the named tables that exist, in one
// query over the pragma table-valued functions.
func (liteCatalog) LoadIndexes(db *gorm.DB, _ string, names []string) (map[string]*dialect.LiveTable, error) {
	var rows []struct {
		Tbl    string
		Idx    *string
		Unique int
		Origin string
		Seqno  *int64 // nil: the index has no key column row
		Col    *string
		Desc   int
		SQL    *string
	}
	if err := db.Raw(`SELECT m.name AS tbl, l.name AS idx, COALESCE(l."unique", 0) AS "unique", COALESCE(l.origin, '') AS origin,
			x.seqno AS seqno, x.name AS col, COALESCE(x."desc", 0) AS "desc", im.sql AS sql
		FROM sqlite_master AS m
		LEFT JOIN pragma_index_list(m.name) AS l
		LEFT JOIN pragma_index_xinfo(l.name) AS x ON x."key" = 1
		LEFT JOIN sqlite_master AS im ON im.type = 'index' AND im.name = l.name
		WHERE m.type = 'table' AND m.name IN ?
		ORDER BY m.name, l.name, x.seqno`, names).Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("read indexes: %w", err)
	}
	tables := map[string]*dialect.LiveTable{}
	for _, r := range rows {
		t := tables[r.Tbl]
		if t == nil {
			t = dialect.NewLiveTable()
			tables[r.Tbl] = t
		}
		if r.Idx == nil {
			continue // a table without indexes
		}
		li, ok := t.Indexes[*r.Idx]
		if !ok {
			// origin "c": CREATE INDEX; "u"/"pk": a UNIQUE or PRIMARY KEY constraint
			li = dialect.LiveIndex{Unique: r.Unique != 0, Constraint: r.Origin != "c"}
			if r.SQL != nil {
				if m := reWhere.FindStringSubmatch(*r.SQL); m != nil {
					li.Where = strings.TrimSpace(m[1])
				}
			}
		}
		if r.Seqno != nil {
			col := "-"
			if r.Col != nil {
				col = *r.Col
			}
			if r.Desc != 0 {
				col += " DESC"
			}
			li.Cols = append(li.Cols, col)
		}
		t.Indexes[*r.Idx] = li
	}
	return tables, nil
}

// hasTable reports whether table name exists.
func (liteCatalog) HasTable(db *gorm.DB, _, name string) (bool, error) {
	var n int64
	err := db.Raw(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n).Error
	return n > 0, err
}

// connectionIssues reports foreign_keys=OFF on the connection: foreign
// keys and ON DELETE CASCADE would silently do nothing.
func (liteCatalog) ConnectionIssues(db *gorm.DB) ([]dialect.SchemaIssue, error) {
	var on int
	if err := db.Raw("PRAGMA foreign_keys").Scan(&on).Error; err != nil {
		return nil, fmt.Errorf("read foreign_keys pragma: %w", err)
	}
	if on != 0 {
		return nil, nil
	}
	return []dialect.SchemaIssue{{Kind: dialect.IssueForeignKeysDisabled, Object: "foreign_keys", Expected: "ON", Actual: "OFF",
		Fix: "PRAGMA foreign_keys = ON on every connection (agentstore.Open's sqlite DSN does this; add _foreign_keys=on to your driver DSN)"}}, nil
}

// pkNotNull: SQLite reports only the declared constraint.
func (liteCatalog) PKNotNull() bool { return false }

// namedForeignKeys: SQLite does not keep constraint names; keys match by shape.
func (liteCatalog) NamedForeignKeys() bool { return false }

// normType compares the declared type without the "PRIMARY KEY
// AUTOINCREMENT" GORM puts in it. t is lower case, single-spaced.
func (liteCatalog) NormType(t string) string {
	return strings.TrimSpace(strings.TrimSuffix(reParenSpace.ReplaceAllString(t, "$1"), "primary key autoincrement"))
}

// reParenSpace matches the spaces around parentheses and commas of a type.
var reParenSpace = regexp.MustCompile(`\s*([(),])\s*`)
