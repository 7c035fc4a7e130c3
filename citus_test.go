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
// given schema; rows mode is refused, naming exactly the tables Citus
// refused when the migrated schema was distributed by hand (the session
// tables without session_id in their keys, the self-referencing sessions
// foreign key, both provider queues), and never the tables it accepted.
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

	_, rowsErr := agentstore.CitusDDL(agentstore.CitusRowsMode, agentstore.WithSchema("tenant_a"))
	err = rowsErr
	var ke *agentstore.CitusKeyError
	if !errors.As(err, &ke) || !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("rows mode: %v, want a *CitusKeyError matching ErrInvalidInput", err)
	}
	refused := map[string]bool{}
	for _, p := range ke.Problems {
		refused[p.Table] = true
		if !strings.Contains(err.Error(), p.Table+" by "+p.Column+": "+p.Constraint) {
			t.Errorf("the error does not name %s's %s: %v", p.Table, p.Constraint, err)
		}
	}
	wantRefused := []string{models.TableSessions, models.TableCompacts, models.TableSummaries, models.TableQueue,
		models.TableTodos, models.TablePlans, models.TableSessionChanges, models.TableOrchestratorQueue, models.TableWorkerQueue}
	var got []string
	for tb := range refused {
		got = append(got, tb)
	}
	sort.Strings(got)
	sort.Strings(wantRefused)
	if !slices.Equal(got, wantRefused) {
		t.Fatalf("rows mode refuses %v, want %v", got, wantRefused)
	}
	problems, err := agentstore.CitusKeyProblems()
	if err != nil || len(problems) != len(ke.Problems) {
		t.Fatalf("CitusKeyProblems = %d, %v; the error has %d", len(problems), err, len(ke.Problems))
	}
	for _, want := range []string{"foreign key parent_id -> sessions.id", "column instance_id is nullable", "primary key (seq)", "unique index idx_queue_id (id)"} {
		if !strings.Contains(rowsErr.Error(), want) {
			t.Errorf("rows refusal does not say %q: %v", want, rowsErr)
		}
	}
}
