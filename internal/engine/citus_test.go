package engine

import (
	"strings"
	"testing"
)

// TestCitusRowsSQL_Shape: the row-based calls (what CitusDDL prints once
// the keys allow it) are one per layout table, in layout order, qualified
// by schema and prefix, the reference table by create_reference_table, a
// group's first table without colocate_with and the others co-located
// with it.
func TestCitusRowsSQL_Shape(t *testing.T) {
	t.Parallel()
	var stmts []string
	for _, l := range strings.Split(citusRowsSQL("p_", "tenant_a"), "\n") {
		if l != "" && !strings.HasPrefix(l, "--") {
			stmts = append(stmts, l)
		}
	}
	layout := CitusLayout()
	if len(stmts) != len(layout) {
		t.Fatalf("%d statements for %d tables:\n%s", len(stmts), len(layout), strings.Join(stmts, "\n"))
	}
	for i, lt := range layout {
		name := `'"tenant_a"."p_` + lt.Table + `"'`
		var want string
		switch {
		case lt.Kind == CitusReference:
			want = "SELECT create_reference_table(" + name + ");"
		case lt.ColocateWith == "":
			want = "SELECT create_distributed_table(" + name + ", '" + lt.Column + "');"
		case lt.ColocateWith == "none":
			want = "SELECT create_distributed_table(" + name + ", '" + lt.Column + "', colocate_with => 'none');"
		default:
			want = "SELECT create_distributed_table(" + name + ", '" + lt.Column + `', colocate_with => '"tenant_a"."p_` + lt.ColocateWith + `"');`
		}
		if stmts[i] != want {
			t.Errorf("statement %d: %s\nwant        %s", i, stmts[i], want)
		}
	}
	if got := citusRowsSQL("p_", ""); !strings.Contains(got, `create_distributed_table('"p_sessions"', 'id');`) {
		t.Errorf("without a schema:\n%s", got)
	}
}
