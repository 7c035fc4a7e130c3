package agentstore_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestExampleSearchRuns builds and runs examples/search (on SQLite) and
// checks what it prints: words, a phrase, a prefix with a role filter and
// a tenant view find the right messages with their matches marked, the
// cursor walks the pages one hit at a time, and hostile input is
// ErrInvalidInput or plain words.
func TestExampleSearchRuns(t *testing.T) {
	t.Parallel()
	bin := testBinary(t, "search")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("examples/search: %v\n%s", err, out)
	}
	for _, want := range []string{
		"password: 3 hits\n",
		"  a1  user      How do I rotate the database [password]?\n",
		"\"database password\" (phrase): 2 hits\n",
		"rest* (prefix), assistant only: 2 hits\n",
		"  a4  assistant Yes: [restart] each replica after the primary, one at a time.\n",
		"password, tenant globex: 1 hits\n  g1  user      Our database [password] leaked, what now?\n",
		"page 1: a3 (score ",
		"page 2: a4 (score ",
		"punctuation only: invalid input: true\n",
		"password) OR (1=1: 0 hits (every word must match)\n",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("examples/search did not print %q:\n%s", want, out)
		}
	}
}
