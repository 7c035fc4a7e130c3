//go:build !race

package agentstore_test

// raceBuild reports whether the test binary was built with -race (see
// race_on_test.go).
const raceBuild = false
