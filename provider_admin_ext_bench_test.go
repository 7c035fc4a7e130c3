package agentstore_test

import (
	"context"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// The estimate variants of BenchmarkProviderAdminScale:
// metrics-estimate is GetSystemMetricsEstimate and depths-estimate
// GetQueueDepthsEstimate, both with the default cap (10,000).
func init() {
	extraAdminBenches = func(b *testing.B, st *agentstore.Store, n int) {
		ctx := context.Background()
		x := st.ProviderAdminExt()
		b.Run("metrics-estimate", func(b *testing.B) {
			var m *duroxide.SystemMetricsEstimate
			for b.Loop() {
				var err error
				if m, err = x.GetSystemMetricsEstimate(ctx, duroxide.EstimateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.Logf("estimate at %d rows: instances %v, executions %v, running %v, completed %v, failed %v, events %v",
				n, m.TotalInstances, m.TotalExecutions, m.RunningInstances, m.CompletedInstances, m.FailedInstances, m.TotalEvents)
		})
		b.Run("depths-estimate", func(b *testing.B) {
			var d *duroxide.QueueDepthsEstimate
			for b.Loop() {
				var err error
				if d, err = x.GetQueueDepthsEstimate(ctx, duroxide.EstimateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.Logf("depths estimate at %d rows: orchestrator %v, worker %v", n, d.OrchestratorQueue, d.WorkerQueue)
		})
	}
}
