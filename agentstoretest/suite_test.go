package agentstoretest_test

import (
	"slices"
	"testing"

	"github.com/agentstore/agentstore/agentstoretest"
)

// TestAreas: the suite's areas are sorted, each has tests, and every test
// name is unique within its area.
func TestAreas(t *testing.T) {
	areas := agentstoretest.Areas()
	if agentstoretest.Count() == 0 || len(areas) == 0 {
		t.Fatalf("the suite has no tests (%d in %v)", agentstoretest.Count(), agentstoretest.AreaNames())
	}
	if names := agentstoretest.AreaNames(); !slices.IsSorted(names) || len(names) != len(areas) {
		t.Fatalf("area names %v are not sorted", names)
	}
	for _, a := range areas {
		if len(a.Tests) == 0 {
			t.Errorf("area %s has no tests", a.Name)
		}
		seen := map[string]bool{}
		for _, tc := range a.Tests {
			if seen[tc.Name] {
				t.Errorf("area %s: test %s twice", a.Name, tc.Name)
			}
			seen[tc.Name] = true
		}
	}
}
