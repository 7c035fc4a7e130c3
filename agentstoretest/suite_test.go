package agentstoretest_test

import (
	"testing"

	"github.com/agentstore/agentstore/agentstoretest"
)

func TestRegistry(t *testing.T) {
	if agentstoretest.Count() == 0 || len(agentstoretest.Areas()) == 0 {
		t.Fatalf("the suite registers no tests (%d in %v)", agentstoretest.Count(), agentstoretest.Areas())
	}
}
