package engine

import "testing"

// TestErrorClassIndexes: the class constants index the classes they name.
func TestErrorClassIndexes(t *testing.T) {
	for idx, name := range map[int]string{classLockLost: "lock_lost", classRetryable: "retryable", classNotFound: "not_found", classOther: "_OTHER"} {
		if got := classIndex(name); got != idx {
			t.Errorf("class %s is at %d, constant says %d", name, got, idx)
		}
	}
	if classOther != len(errorClasses())-1 {
		t.Errorf("classOther %d is not the last class (%d)", classOther, len(errorClasses())-1)
	}
}
