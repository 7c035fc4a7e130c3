package agentstore_test

import "testing"

// TestTimingSensitive runs the tests whose assertions bound a latency (a
// wake-up within 150 ms, a hand-off within 3 s, a delayed item fetched at
// its visible_at) or count statements over a wall-clock window (the idle
// cost): as parallel subtests of one serial test. Go runs a package's
// serial tests before its parallel ones, so these run beside each other
// (each mostly waits) and never beside the heavy parallel tests, whose
// load would stretch their latencies; until 2026-12-05 each was a serial
// test of its own and they ran one after another (about 30 s of a plain
// `go test ./...` with the CPU mostly idle, against about 13 s together).
func TestTimingSensitive(t *testing.T) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"IdleFetchCost", testIdleFetchCost},
		{"IdleDequeueCost", testIdleDequeueCost},
		{"ProviderHandOffWakesOneFetcher", testProviderHandOffWakesOneFetcher},
		{"ProviderHandOffPassedOn", testProviderHandOffPassedOn},
		{"ProviderFetchWakesOnEnqueue", testProviderFetchWakesOnEnqueue},
		{"ProviderStatementsPerWorkflow", testProviderStatementsPerWorkflow},
		{"SQLiteOrchFetchReadsBeforeWriteLock", testSQLiteOrchFetchReadsBeforeWriteLock},
		{"SQLiteWorkerIdleRecheckReadsBeforeWriteLock", testSQLiteWorkerIdleRecheckReadsBeforeWriteLock},
		{"TelemetryWakeup", testTelemetryWakeup},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}
