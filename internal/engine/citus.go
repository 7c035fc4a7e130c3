package engine

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"gorm.io/gorm/schema"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
)

// CitusMode names one of the two ways Citus distributes agentstore's tables.
type CitusMode string

// The Citus layouts CitusDDL writes.
const (
	// CitusSchemaMode is schema-based sharding: the whole schema (one
	// tenant or deployment, WithSchema) becomes one distributed schema,
	// all its tables on one node (citus_schema_distribute).
	CitusSchemaMode CitusMode = "schema"
	// CitusRowsMode is row-based distribution: each table distributed by
	// the column CitusLayout names, co-located by group, or replicated to
	// every node (create_distributed_table / create_reference_table).
	CitusRowsMode CitusMode = "rows"
)

// CitusTableKind says how Citus holds a table in the row-based layout.
type CitusTableKind string

// The kinds of table in CitusLayout.
const (
	// CitusDistributed: hash-distributed by CitusTable.Column.
	CitusDistributed CitusTableKind = "distributed"
	// CitusReference: a copy on every node (create_reference_table).
	CitusReference CitusTableKind = "reference"
)

// CitusTable is one table of the row-based Citus layout.
type CitusTable struct {
	// Table is the table's base name (models.Table*), without prefix or schema.
	Table string
	// Kind is CitusDistributed or CitusReference.
	Kind CitusTableKind
	// Column is the distribution column ("" for a reference table).
	Column string
	// ColocateWith is the base name of the table this one is co-located
	// with (its group's first table), "" for the first table of a group,
	// "none" for a distributed table in a group of its own.
	ColocateWith string
	// Group names the co-location group: "session" (a session and every
	// row that belongs to it, by session id), "provider" (an orchestration
	// instance and its rows, by instance id), "activity_session" (the
	// provider's activity sessions, by their own id), "" for a reference
	// table.
	Group string
}

// CitusLayout returns the row-based Citus layout of every agentstore
// table, in the order the distribution calls must run (a group's first
// table before the tables co-located with it). The session domain is
// distributed by session id (sessions.id; session_id in its child tables),
// the provider by instance id; the schema_version table is a reference
// table.
func CitusLayout() []CitusTable {
	out := []CitusTable{{Table: models.TableSchemaVersion, Kind: CitusReference}}
	out = append(out, CitusTable{Table: models.TableSessions, Kind: CitusDistributed, Column: "id", Group: "session"})
	for _, t := range []string{models.TableMessages, models.TableCompacts, models.TableSummaries, models.TableQueue,
		models.TableTodos, models.TablePlans, models.TableSessionChanges} {
		out = append(out, CitusTable{Table: t, Kind: CitusDistributed, Column: "session_id", ColocateWith: models.TableSessions, Group: "session"})
	}
	out = append(out, CitusTable{Table: models.TableInstances, Kind: CitusDistributed, Column: "instance_id", Group: "provider"})
	for _, t := range []string{models.TableExecutions, models.TableHistory, models.TableOrchestratorQueue,
		models.TableWorkerQueue, models.TableInstanceLocks, models.TableKVStore, models.TableKVDelta} {
		out = append(out, CitusTable{Table: t, Kind: CitusDistributed, Column: "instance_id", ColocateWith: models.TableInstances, Group: "provider"})
	}
	return append(out, CitusTable{Table: models.TableActivitySessions, Kind: CitusDistributed, Column: "session_id",
		ColocateWith: "none", Group: "activity_session"})
}

// CitusKeyProblem is one constraint of the schema that keeps a table from
// being distributed in the row-based layout.
type CitusKeyProblem struct {
	// Table is the table's base name.
	Table string
	// Column is the table's distribution column in CitusLayout.
	Column string
	// Constraint describes the constraint: "primary key (id)", "unique
	// index idx_... (id)", "foreign key parent_id -> sessions.id",
	// "column instance_id is nullable".
	Constraint string
}

// CitusKeyError is the refusal of the row-based layout by CitusDDL: the
// schema of this build has primary keys, unique indexes or foreign keys
// without the distribution column, which Citus refuses to distribute
// (create_distributed_table fails on them). It matches ErrInvalidInput.
type CitusKeyError struct {
	// Problems lists every blocking constraint, in CitusLayout's order.
	Problems []CitusKeyProblem
}

// Error names every table and constraint in the way.
func (e *CitusKeyError) Error() string {
	var b strings.Builder
	var tables []string
	for _, p := range e.Problems {
		if !slices.Contains(tables, p.Table) {
			tables = append(tables, p.Table)
		}
	}
	fmt.Fprintf(&b, "%s: row-based Citus distribution needs the distribution column in every key; schema version %d lacks it in %d table(s) (%s):",
		ErrInvalidInput, models.SchemaVersion, len(tables), strings.Join(tables, ", "))
	for _, p := range e.Problems {
		fmt.Fprintf(&b, " %s by %s: %s;", p.Table, p.Column, p.Constraint)
	}
	b.WriteString(" use schema-based sharding (citus mode schema) instead")
	return b.String()
}

// Unwrap returns ErrInvalidInput.
func (e *CitusKeyError) Unwrap() error { return ErrInvalidInput }

// citusModel returns the model of table base.
func citusModel(base string) any {
	for _, m := range models.All() {
		if t, ok := m.(interface{ TableName(schema.Namer) string }); ok && t.TableName(models.NewNamer("", "")) == base {
			return m
		}
	}
	return nil
}

// CitusKeyProblems checks the models against the row-based layout: every
// primary key and unique index of a distributed table must contain its
// distribution column, which must be NOT NULL, and every foreign key must
// join co-located tables on their distribution columns (or point at a
// reference table).
func CitusKeyProblems() ([]CitusKeyProblem, error) {
	layout := CitusLayout()
	byTable := map[string]CitusTable{}
	for _, t := range layout {
		byTable[t.Table] = t
	}
	cache := &sync.Map{}
	namer := models.NewNamer("", "")
	var out []CitusKeyProblem
	for _, lt := range layout {
		if lt.Kind != CitusDistributed {
			continue
		}
		m := citusModel(lt.Table)
		if m == nil {
			return nil, fmt.Errorf("citus layout: no model for table %s", lt.Table)
		}
		sch, err := schema.Parse(m, cache, namer)
		if err != nil {
			return nil, fmt.Errorf("citus layout: parse model of %s: %w", lt.Table, err)
		}
		add := func(c string) { out = append(out, CitusKeyProblem{Table: lt.Table, Column: lt.Column, Constraint: c}) }
		f := sch.LookUpField(lt.Column)
		if f == nil {
			add("no column " + lt.Column)
			continue
		}
		if !f.NotNull && !f.PrimaryKey {
			add("column " + lt.Column + " is nullable")
		}
		var pk []string
		for _, pf := range sch.PrimaryFields {
			pk = append(pk, pf.DBName)
		}
		if !slices.Contains(pk, lt.Column) {
			add("primary key (" + strings.Join(pk, ", ") + ")")
		}
		for _, idx := range sch.ParseIndexes() {
			if !strings.EqualFold(idx.Class, "UNIQUE") {
				continue
			}
			var cols []string
			for _, o := range idx.Fields {
				cols = append(cols, o.DBName)
			}
			if !slices.Contains(cols, lt.Column) {
				add("unique index " + idx.Name + " (" + strings.Join(cols, ", ") + ")")
			}
		}
		for _, rel := range sch.Relationships.Relations {
			for _, ref := range rel.References {
				if ref.ForeignKey == nil || ref.PrimaryKey == nil || ref.ForeignKey.Schema != sch {
					continue
				}
				target := byTable[ref.PrimaryKey.Schema.Table]
				if target.Kind == CitusReference {
					continue
				}
				if ref.ForeignKey.DBName != lt.Column || ref.PrimaryKey.DBName != target.Column || target.Group != lt.Group {
					add("foreign key " + ref.ForeignKey.DBName + " -> " + ref.PrimaryKey.Schema.Table + "." + ref.PrimaryKey.DBName)
				}
			}
		}
	}
	return out, nil
}

// CitusDDL returns the statements a Citus user runs, after Migrate (or
// the exported chain) created the tables, to distribute them on Citus.
// mode CitusSchemaMode needs WithSchema (the schema to distribute) and
// returns citus_schema_distribute of that schema; CitusRowsMode returns a
// create_reference_table or create_distributed_table call per table of
// CitusLayout (with colocate_with), rendered for WithTablePrefix and
// WithSchema, or a *CitusKeyError (ErrInvalidInput) naming every table
// whose keys lack the distribution column in this build's schema. Another
// mode, a missing schema for CitusSchemaMode, or an invalid prefix or
// schema is ErrInvalidConfig. No database is contacted.
func CitusDDL(ds []dialect.Dialect, mode CitusMode, opts ...Option) (string, error) {
	cfg, err := BuildConfig(opts)
	if err != nil {
		return "", err
	}
	dl, err := dialectNamed(ds, Postgres)
	if err != nil {
		return "", err
	}
	if err := dl.CheckConfig(&cfg.Config); err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString("-- agentstore on Citus: run after the schema exists (Migrate or the exported chain), as a user allowed to\n" +
		"-- distribute tables. Set citus.propagate_set_commands = 'local' for the Store's connections (in the DSN's\n" +
		"-- options or ALTER ROLE ... SET) so that lock and statement timeouts reach the workers. See docs/distributed.md.\n")
	switch mode {
	case CitusSchemaMode:
		if cfg.Schema == "" {
			return "", configf("citus mode %q distributes one schema: give the schema (WithSchema / --schema)", mode)
		}
		fmt.Fprintf(&b, "-- schema-based sharding: every table of schema %s on one node, co-located, foreign keys kept\n", cfg.Schema)
		fmt.Fprintf(&b, "SELECT citus_schema_distribute('%s');\n", quoteIdentLit(cfg.Schema))
		return b.String(), nil
	case CitusRowsMode:
		problems, err := CitusKeyProblems()
		if err != nil {
			return "", err
		}
		if len(problems) > 0 {
			return "", &CitusKeyError{Problems: problems}
		}
		b.WriteString(citusRowsSQL(cfg.Prefix, cfg.Schema))
		return b.String(), nil
	default:
		return "", configf("unknown citus mode %q (want %q or %q)", clip(string(mode)), CitusSchemaMode, CitusRowsMode)
	}
}

// citusRowsSQL is the row-based layout's distribution calls for prefix
// and schema, one statement a line, a group's first table first.
func citusRowsSQL(prefix, schemaName string) string {
	name := func(base string) string {
		if schemaName != "" {
			return quoteIdentLit(schemaName) + "." + quoteIdentLit(prefix+base)
		}
		return quoteIdentLit(prefix + base)
	}
	var b strings.Builder
	b.WriteString("-- row-based distribution (CitusLayout): one statement per table, a group's first table first\n")
	for _, t := range CitusLayout() {
		switch {
		case t.Kind == CitusReference:
			fmt.Fprintf(&b, "SELECT create_reference_table('%s');\n", name(t.Table))
		case t.ColocateWith == "":
			fmt.Fprintf(&b, "SELECT create_distributed_table('%s', '%s');\n", name(t.Table), t.Column)
		case t.ColocateWith == "none":
			fmt.Fprintf(&b, "SELECT create_distributed_table('%s', '%s', colocate_with => 'none');\n", name(t.Table), t.Column)
		default:
			fmt.Fprintf(&b, "SELECT create_distributed_table('%s', '%s', colocate_with => '%s');\n", name(t.Table), t.Column, name(t.ColocateWith))
		}
	}
	return b.String()
}

// quoteIdentLit double-quotes an identifier that already passed the
// prefix/schema validation (letters, digits, underscore), for use inside a
// SQL string literal ('"schema"."table"').
func quoteIdentLit(id string) string { return `"` + id + `"` }
