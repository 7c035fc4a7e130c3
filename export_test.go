package agentstore

import "github.com/agentstore/agentstore/internal/engine"

// ModelsDDL exposes the DDL GORM generates from the head models to the
// external tests, which the chain's head must equal.
func ModelsDDL(d Dialect, opts ...Option) (string, error) {
	return engine.ModelsDDL(dialects(), d, opts...)
}

// TelemetryGaugeSQL exposes the queue gauges' depth queries to the
// external tests, by queue, at now (Store clock, ms) with their arguments
// inlined (for EXPLAIN).
func TelemetryGaugeSQL(st *Store, now int64) map[string]string {
	return engine.TelemetryGaugeSQL(st.e, now)
}

// TelemetrySpanNames lists the span names of every instrumented method.
func TelemetrySpanNames() []string { return engine.TelemetrySpanNames() }
