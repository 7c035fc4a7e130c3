package engine

import (
	"fmt"
	"strings"
)

// Hooks for the root package's tests (the engine is internal, so they are
// not part of the public API).

// TelemetryGaugeSQL returns the queue gauges' depth queries of st, by
// queue, at now (Store clock, ms) with their arguments inlined (for
// EXPLAIN).
func TelemetryGaugeSQL(st *Store, now int64) map[string]string {
	out := map[string]string{}
	for _, q := range gaugeQueries(st, now)[:3] {
		sql := q.sql
		for _, a := range q.args {
			sql = strings.Replace(sql, "?", fmt.Sprint(a), 1)
		}
		out[q.queue] = sql
	}
	return out
}

// TelemetrySpanNames lists the span names of every instrumented method.
func TelemetrySpanNames() []string {
	out := make([]string, 0, len(opDefs()))
	for _, d := range opDefs() {
		out = append(out, "agentstore."+d.iface+"."+d.method)
	}
	return out
}
