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
// spent 45–67 s each mostly waiting for the linker. Under -race (CI) the
// binaries are built with -race too: the test build has compiled every
// package they import that way, so only the links are left, where a plain
// build compiled the whole dependency tree again, cgo SQLite included
// (2026-12-04: the tests that wait for it 190–236 s into the run; the
// same build 15 s with -race from the test build's cache, 123 s without).
var testBinaries struct {
	once sync.Once
	dir  string
	out  []byte
	err  error
}

// testLinkFlags leave the symbol table and DWARF out of the binaries the
// tests build: the links (external, for cgo SQLite) then take about half
// the CPU (2026-12-05: the seven binaries 11 s of CPU against 26 s, 6 s
// of wall time against 14 s). A panic's trace still names functions and
// lines.
const testLinkFlags = "-s -w"

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
		args := []string{"build", "-ldflags=" + testLinkFlags, "-o", testBinaries.dir + string(filepath.Separator)}
		if raceBuild {
			args = append(args, "-race")
		}
		args = append(args, builtPackages...)
		testBinaries.out, testBinaries.err = exec.Command("go", args...).CombinedOutput()
	})
	if testBinaries.err != nil {
		t.Fatalf("go build %v (-race %v): %v\n%s", builtPackages, raceBuild, testBinaries.err, testBinaries.out)
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
