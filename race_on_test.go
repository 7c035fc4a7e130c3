//go:build race

package agentstore_test

// raceBuild reports whether the test binary was built with -race:
// testBinary then builds the CLI and the examples with -race too, from
// the packages the test build already compiled.
const raceBuild = true
