package agentstore_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// testBinaries builds the CLI and every example once per test process, in
// one `go build` (the binaries of one build share its compiled packages
// and link in parallel), the first time a test asks for one. Building each
// in its own `go build` per test cost a link of a large binary per test:
// on this 2-core machine the CLI, hostile-secrets, docs and example tests
// spent 45–67 s each mostly waiting for the linker.
var testBinaries struct {
	once sync.Once
	dir  string
	out  []byte
	err  error
}

// builtPackages are the main packages testBinary can return, each built
// to a file named after its last path element.
var builtPackages = []string{"./cmd/agentstore", "./examples/..."}

// testBinary returns the path of the built binary of the main package
// whose last path element is name ("agentstore" for the CLI, "search" for
// examples/search), failing t if the build failed or made no such binary.
func testBinary(t testing.TB, name string) string {
	t.Helper()
	testBinaries.once.Do(func() {
		testBinaries.dir, testBinaries.err = os.MkdirTemp("", "agentstore-testbin-")
		if testBinaries.err != nil {
			return
		}
		args := append([]string{"build", "-o", testBinaries.dir + string(filepath.Separator)}, builtPackages...)
		testBinaries.out, testBinaries.err = exec.Command("go", args...).CombinedOutput()
	})
	if testBinaries.err != nil {
		t.Fatalf("go build %v: %v\n%s", builtPackages, testBinaries.err, testBinaries.out)
	}
	bin := filepath.Join(testBinaries.dir, name)
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("go build %v made no %s: %v", builtPackages, name, err)
	}
	return bin
}

// removeTestBinaries deletes what testBinary built (TestMain, after the
// tests).
func removeTestBinaries() {
	if testBinaries.dir != "" {
		_ = os.RemoveAll(testBinaries.dir)
	}
}
