package agentstore_test

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
)

// statementsOf returns the non-comment lines of a DDL script.
func statementsOf(ddl string) []string {
	var out []string
	for _, l := range strings.Split(ddl, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
			out = append(out, l)
		}
	}
	return out
}

// TestCitusLayout_CoversEveryTable: every table of the models is in the
// layout once, distributed ones by a column the model has, NOT NULL and
// of the same type across a co-location group, a group's first table
// before the tables co-located with it.
func TestCitusLayout_CoversEveryTable(t *testing.T) {
	t.Parallel()
	var want []string
	cols := map[string]map[string]*schema.Field{}
	for _, m := range models.All() {
		sch, err := schema.Parse(m, &sync.Map{}, models.NewNamer("", ""))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, sch.Table)
		cols[sch.Table] = sch.FieldsByDBName
	}
	var got []string
	seen := map[string]bool{}
	groupType := map[string]string{}
	for _, lt := range agentstore.CitusLayout() {
		got = append(got, lt.Table)
		switch lt.Kind {
		case agentstore.CitusReference:
			if lt.Column != "" || lt.Group != "" || lt.ColocateWith != "" {
				t.Errorf("reference table %s has a column, group or co-location: %+v", lt.Table, lt)
			}
		case agentstore.CitusDistributed:
			f := cols[lt.Table][lt.Column]
			if f == nil {
				t.Fatalf("%s: distribution column %q is not a column of the model", lt.Table, lt.Column)
			}
			if gt, ok := groupType[lt.Group]; ok && gt != string(f.DataType) {
				t.Errorf("%s.%s: type %s differs from its group %s (%s)", lt.Table, lt.Column, f.DataType, lt.Group, gt)
			}
			groupType[lt.Group] = string(f.DataType)
			if lt.ColocateWith != "" && lt.ColocateWith != "none" && !seen[lt.ColocateWith] {
				t.Errorf("%s is co-located with %s, which comes later or not at all", lt.Table, lt.ColocateWith)
			}
		default:
			t.Errorf("%s: kind %q", lt.Table, lt.Kind)
		}
		seen[lt.Table] = true
	}
	sort.Strings(want)
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Fatalf("layout tables %v, models %v", got, want)
	}
}

// TestCitusDDL_Shape: schema mode is one citus_schema_distribute of the
// given schema; rows mode (since V13, which put the distribution column in
// every key) is one create_reference_table / create_distributed_table call
// per table of CitusLayout, in its order, and CitusKeyProblems is empty.
func TestCitusDDL_Shape(t *testing.T) {
	t.Parallel()
	ddl, err := agentstore.CitusDDL(agentstore.CitusSchemaMode, agentstore.WithSchema("tenant_a"), agentstore.WithTablePrefix("claude_"))
	if err != nil {
		t.Fatal(err)
	}
	if got := statementsOf(ddl); !slices.Equal(got, []string{`SELECT citus_schema_distribute('"tenant_a"');`}) {
		t.Fatalf("schema mode: %q", got)
	}
	if !strings.Contains(ddl, "citus.propagate_set_commands") {
		t.Error("schema mode does not mention citus.propagate_set_commands")
	}
	if _, err := agentstore.CitusDDL(agentstore.CitusSchemaMode); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Errorf("schema mode without a schema: %v, want ErrInvalidConfig", err)
	}
	if _, err := agentstore.CitusDDL("shards", agentstore.WithSchema("s")); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Errorf("unknown mode: %v, want ErrInvalidConfig", err)
	}
	if _, err := agentstore.CitusDDL(agentstore.CitusSchemaMode, agentstore.WithSchema(`a"b`)); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Errorf("bad schema: %v, want ErrInvalidConfig", err)
	}

	problems, err := agentstore.CitusKeyProblems()
	if err != nil || len(problems) != 0 {
		t.Fatalf("CitusKeyProblems = %+v, %v; want none since V13", problems, err)
	}
	rows, err := agentstore.CitusDDL(agentstore.CitusRowsMode, agentstore.WithSchema("tenant_a"), agentstore.WithTablePrefix("claude_"))
	if err != nil {
		t.Fatalf("rows mode: %v", err)
	}
	got := statementsOf(rows)
	layout := agentstore.CitusLayout()
	if len(got) != len(layout) {
		t.Fatalf("rows mode: %d statements for %d tables:\n%s", len(got), len(layout), rows)
	}
	for i, lt := range layout {
		name := `'"tenant_a"."claude_` + lt.Table + `"'`
		fn := "create_distributed_table(" + name + ", '" + lt.Column + "'"
		if lt.Kind == agentstore.CitusReference {
			fn = "create_reference_table(" + name + ")"
		}
		if !strings.HasPrefix(got[i], "SELECT "+fn) {
			t.Errorf("statement %d = %s, want SELECT %s...", i, got[i], fn)
		}
	}
}

// TestCitusRowsLayout_MigratedKeys: on a PostgreSQL schema built by
// Migrate, every primary key and unique index of a distributed table
// contains its distribution column, that column is NOT NULL, and every
// foreign key joins two tables of one co-location group on their
// distribution columns: what create_distributed_table requires (read from
// the catalog Migrate built, not from the models).
func TestCitusRowsLayout_MigratedKeys(t *testing.T) {
	t.Parallel()
	h := newHarness(t, agentstore.Postgres)
	h.New(t, agentstore.WithTablePrefix("c_"))
	db := requirePostgres(t)
	byTable := map[string]agentstore.CitusTable{}
	for _, lt := range agentstore.CitusLayout() {
		byTable["c_"+lt.Table] = lt
	}
	checked := 0
	for _, lt := range agentstore.CitusLayout() {
		if lt.Kind != agentstore.CitusDistributed {
			continue
		}
		rel := `"` + h.Schema + `"."c_` + lt.Table + `"`
		rows, err := db.Query(`SELECT i.indexrelid::regclass::text, i.indisprimary,
 EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = i.indrelid AND a.attname = $2 AND a.attnum = ANY (i.indkey))
 FROM pg_index i WHERE i.indrelid = $1::regclass AND i.indisunique`, rel, lt.Column)
		if err != nil {
			t.Fatal(err)
		}
		pk := false
		for rows.Next() {
			var name string
			var primary, has bool
			if err := rows.Scan(&name, &primary, &has); err != nil {
				t.Fatal(err)
			}
			pk = pk || primary
			if !has {
				t.Errorf("%s: unique index %s lacks the distribution column %s", lt.Table, name, lt.Column)
			}
			checked++
		}
		_ = rows.Close()
		if !pk {
			t.Errorf("%s has no primary key", lt.Table)
		}
		var notNull bool
		if err := db.QueryRow(`SELECT attnotnull FROM pg_attribute WHERE attrelid = $1::regclass AND attname = $2`, rel, lt.Column).Scan(&notNull); err != nil || !notNull {
			t.Errorf("%s.%s: NOT NULL %v (%v)", lt.Table, lt.Column, notNull, err)
		}
		fks, err := db.Query(`SELECT c.conname, c.confrelid::regclass::text,
 (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey))::text,
 (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a WHERE a.attrelid = c.confrelid AND a.attnum = ANY (c.confkey))::text
 FROM pg_constraint c WHERE c.conrelid = $1::regclass AND c.contype = 'f'`, rel)
		if err != nil {
			t.Fatal(err)
		}
		for fks.Next() {
			var name, ref, cols, refCols string
			if err := fks.Scan(&name, &ref, &cols, &refCols); err != nil {
				t.Fatal(err)
			}
			target := byTable[strings.Trim(strings.TrimPrefix(ref, h.Schema+"."), `"`)]
			if target.Group != lt.Group || cols != "{"+lt.Column+"}" || refCols != "{"+target.Column+"}" {
				t.Errorf("%s: foreign key %s (%s) -> %s (%s) is not between co-located distribution columns", lt.Table, name, cols, ref, refCols)
			}
		}
		_ = fks.Close()
	}
	if checked < 15 {
		t.Fatalf("only %d unique indexes checked", checked)
	}
}
