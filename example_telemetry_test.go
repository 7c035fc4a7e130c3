package agentstore_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// Traces and metrics through your own providers (nothing is registered
// globally): a span per repository call, child of the caller's span, and
// the call, queue and wake-up metrics.
func ExampleWithTracerProvider() {
	ctx := context.Background()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	st, err := agentstore.Open(ctx, "sqlite::memory:", agentstore.WithTracerProvider(tp), agentstore.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		panic(err)
	}
	ctx, turn := tp.Tracer("app").Start(ctx, "agent turn")
	s := repo.NewSession()
	if err := st.Sessions().Save(ctx, s); err != nil {
		panic(err)
	}
	if _, err := st.SessionQueue().Enqueue(ctx, s.ID, "do something", 0); err != nil {
		panic(err)
	}
	turn.End()

	for _, sp := range spans.GetSpans() {
		fmt.Println(sp.Name, sp.Parent.SpanID() == turn.SpanContext().SpanID())
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == agentstore.MetricQueueDepth {
			for _, p := range g.DataPoints {
				q, _ := p.Attributes.Value(agentstore.AttrQueue)
				fmt.Println(m.Name, q.AsString(), p.Value)
			}
		}
	}
	// Unordered output:
	// agentstore.Sessions.Save true
	// agentstore.SessionQueue.Enqueue true
	// agent turn false
	// agentstore.queue.depth orchestrator 0
	// agentstore.queue.depth worker 0
	// agentstore.queue.depth session 1
}
