package engine

import (
	"context"
	"time"

	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// providerAPI is what Store.Provider and Store.ProviderAdmin hand out.
type providerAPI interface {
	duroxide.Provider
	duroxide.ProviderAdminExt
}

// providerAPI returns the Store's provider: the *gormProvider itself
// without telemetry, else its traced wrapper (one per Store).
func (s *Store) providerAPI() providerAPI {
	p := s.provider()
	t := s.tel
	if t == nil {
		return p
	}
	t.provOnce.Do(func() { t.prov = &tracedProvider{gormProvider: p, t: t} })
	return t.prov
}

// tracedProvider is the provider with a span and metrics per call. It
// behaves exactly as the *gormProvider it wraps (the same errors and
// results); Admin returns the wrapper itself. The provider is embedded so
// that a method added to the interfaces later still works (untraced until
// it gets its wrapper here and its row in opDefs:
// TestTelemetryCoversEveryMethod fails meanwhile).
type tracedProvider struct {
	*gormProvider
	t *telemetry
}

var _ providerAPI = (*tracedProvider)(nil)

// Name and Version (no database call) are the embedded provider's.

// Admin implements duroxide.Provider: the traced management interface.
func (w *tracedProvider) Admin() duroxide.ProviderAdmin { return w }

func routing(item duroxide.WorkItem) string {
	if item == nil {
		return ""
	}
	return item.RoutingInstance()
}

// FetchOrchestrationItem implements duroxide.Provider.
func (w *tracedProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (*duroxide.OrchestrationItem, error) {
	ctx, c := w.t.start(ctx, opProvFetchOrchestrationItem)
	it, err := w.gormProvider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
	if it != nil {
		c.instance(it.Instance)
		c.redelivered(int64(it.AttemptCount), QueueOrchestrator)
	}
	c.endEmpty(err, it == nil)
	return it, err
}

// AckOrchestrationItem implements duroxide.Provider.
func (w *tracedProvider) AckOrchestrationItem(ctx context.Context, lockToken string, ack duroxide.OrchestrationAck) error {
	ctx, c := w.t.start(ctx, opProvAckOrchestrationItem)
	err := w.gormProvider.AckOrchestrationItem(ctx, lockToken, ack)
	c.end(err)
	return err
}

// AbandonOrchestrationItem implements duroxide.Provider.
func (w *tracedProvider) AbandonOrchestrationItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	ctx, c := w.t.start(ctx, opProvAbandonOrchestrationItem)
	err := w.gormProvider.AbandonOrchestrationItem(ctx, lockToken, delay, ignoreAttempt)
	c.end(err)
	return err
}

// RenewOrchestrationItemLock implements duroxide.Provider.
func (w *tracedProvider) RenewOrchestrationItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	ctx, c := w.t.start(ctx, opProvRenewOrchestrationItemLock)
	err := w.gormProvider.RenewOrchestrationItemLock(ctx, lockToken, extendFor)
	c.end(err)
	return err
}

// Read implements duroxide.Provider.
func (w *tracedProvider) Read(ctx context.Context, instance string) ([]duroxide.Event, error) {
	ctx, c := w.t.start(ctx, opProvRead)
	c.instance(instance)
	out, err := w.gormProvider.Read(ctx, instance)
	c.end(err)
	return out, err
}

// ReadWithExecution implements duroxide.Provider.
func (w *tracedProvider) ReadWithExecution(ctx context.Context, instance string, executionID uint64) ([]duroxide.Event, error) {
	ctx, c := w.t.start(ctx, opProvReadWithExecution)
	c.instance(instance)
	out, err := w.gormProvider.ReadWithExecution(ctx, instance, executionID)
	c.end(err)
	return out, err
}

// AppendWithExecution implements duroxide.Provider.
func (w *tracedProvider) AppendWithExecution(ctx context.Context, instance string, executionID uint64, events []duroxide.Event) error {
	ctx, c := w.t.start(ctx, opProvAppendWithExecution)
	c.instance(instance)
	err := w.gormProvider.AppendWithExecution(ctx, instance, executionID, events)
	c.end(err)
	return err
}

// EnqueueForOrchestrator implements duroxide.Provider.
func (w *tracedProvider) EnqueueForOrchestrator(ctx context.Context, item duroxide.WorkItem, delay time.Duration) error {
	ctx, c := w.t.start(ctx, opProvEnqueueForOrchestrator)
	c.instance(routing(item))
	err := w.gormProvider.EnqueueForOrchestrator(ctx, item, delay)
	c.end(err)
	return err
}

// EnqueueForWorker implements duroxide.Provider.
func (w *tracedProvider) EnqueueForWorker(ctx context.Context, item duroxide.WorkItem) error {
	ctx, c := w.t.start(ctx, opProvEnqueueForWorker)
	c.instance(routing(item))
	err := w.gormProvider.EnqueueForWorker(ctx, item)
	c.end(err)
	return err
}

// FetchWorkItem implements duroxide.Provider.
func (w *tracedProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) (*duroxide.WorkItemLease, error) {
	ctx, c := w.t.start(ctx, opProvFetchWorkItem)
	l, err := w.gormProvider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
	if l != nil {
		c.instance(routing(l.Item))
		c.redelivered(int64(l.AttemptCount), QueueWorker)
	}
	c.endEmpty(err, l == nil)
	return l, err
}

// AckWorkItem implements duroxide.Provider.
func (w *tracedProvider) AckWorkItem(ctx context.Context, lockToken string, completion duroxide.WorkItem) error {
	ctx, c := w.t.start(ctx, opProvAckWorkItem)
	c.instance(routing(completion))
	err := w.gormProvider.AckWorkItem(ctx, lockToken, completion)
	c.end(err)
	return err
}

// RenewWorkItemLock implements duroxide.Provider.
func (w *tracedProvider) RenewWorkItemLock(ctx context.Context, lockToken string, extendFor time.Duration) error {
	ctx, c := w.t.start(ctx, opProvRenewWorkItemLock)
	err := w.gormProvider.RenewWorkItemLock(ctx, lockToken, extendFor)
	c.end(err)
	return err
}

// AbandonWorkItem implements duroxide.Provider.
func (w *tracedProvider) AbandonWorkItem(ctx context.Context, lockToken string, delay time.Duration, ignoreAttempt bool) error {
	ctx, c := w.t.start(ctx, opProvAbandonWorkItem)
	err := w.gormProvider.AbandonWorkItem(ctx, lockToken, delay, ignoreAttempt)
	c.end(err)
	return err
}

// RenewSessionLock implements duroxide.Provider.
func (w *tracedProvider) RenewSessionLock(ctx context.Context, ownerIDs []string, extendFor, idleTimeout time.Duration) (int, error) {
	ctx, c := w.t.start(ctx, opProvRenewSessionLock)
	n, err := w.gormProvider.RenewSessionLock(ctx, ownerIDs, extendFor, idleTimeout)
	c.end(err)
	return n, err
}

// CleanupOrphanedSessions implements duroxide.Provider.
func (w *tracedProvider) CleanupOrphanedSessions(ctx context.Context, idleTimeout time.Duration) (int, error) {
	ctx, c := w.t.start(ctx, opProvCleanupOrphanedSessions)
	n, err := w.gormProvider.CleanupOrphanedSessions(ctx, idleTimeout)
	c.end(err)
	return n, err
}

// GetCustomStatus implements duroxide.Provider.
func (w *tracedProvider) GetCustomStatus(ctx context.Context, instance string, lastSeenVersion uint64) (*duroxide.CustomStatus, error) {
	ctx, c := w.t.start(ctx, opProvGetCustomStatus)
	c.instance(instance)
	out, err := w.gormProvider.GetCustomStatus(ctx, instance, lastSeenVersion)
	c.end(err)
	return out, err
}

// GetKVValue implements duroxide.Provider.
func (w *tracedProvider) GetKVValue(ctx context.Context, instance, key string) (*string, error) {
	ctx, c := w.t.start(ctx, opProvGetKVValue)
	c.instance(instance)
	out, err := w.gormProvider.GetKVValue(ctx, instance, key)
	c.end(err)
	return out, err
}

// GetKVAllValues implements duroxide.Provider.
func (w *tracedProvider) GetKVAllValues(ctx context.Context, instance string) (map[string]string, error) {
	ctx, c := w.t.start(ctx, opProvGetKVAllValues)
	c.instance(instance)
	out, err := w.gormProvider.GetKVAllValues(ctx, instance)
	c.end(err)
	return out, err
}

// GetInstanceStats implements duroxide.Provider.
func (w *tracedProvider) GetInstanceStats(ctx context.Context, instance string) (*duroxide.SystemStats, error) {
	ctx, c := w.t.start(ctx, opProvGetInstanceStats)
	c.instance(instance)
	out, err := w.gormProvider.GetInstanceStats(ctx, instance)
	c.end(err)
	return out, err
}

// ListInstances implements duroxide.ProviderAdmin.
func (w *tracedProvider) ListInstances(ctx context.Context) ([]string, error) {
	ctx, c := w.t.start(ctx, opAdminListInstances)
	out, err := w.gormProvider.ListInstances(ctx)
	c.end(err)
	return out, err
}

// ListInstancesByStatus implements duroxide.ProviderAdmin.
func (w *tracedProvider) ListInstancesByStatus(ctx context.Context, status string) ([]string, error) {
	ctx, c := w.t.start(ctx, opAdminListInstancesByStatus)
	out, err := w.gormProvider.ListInstancesByStatus(ctx, status)
	c.end(err)
	return out, err
}

// ListExecutions implements duroxide.ProviderAdmin.
func (w *tracedProvider) ListExecutions(ctx context.Context, instance string) ([]uint64, error) {
	ctx, c := w.t.start(ctx, opAdminListExecutions)
	c.instance(instance)
	out, err := w.gormProvider.ListExecutions(ctx, instance)
	c.end(err)
	return out, err
}

// ListInstancesPage implements duroxide.ProviderAdmin.
func (w *tracedProvider) ListInstancesPage(ctx context.Context, p repo.PageParams) ([]string, string, error) {
	ctx, c := w.t.start(ctx, opAdminListInstancesPage)
	out, next, err := w.gormProvider.ListInstancesPage(ctx, p)
	c.end(err)
	return out, next, err
}

// ListInstancesByStatusPage implements duroxide.ProviderAdmin.
func (w *tracedProvider) ListInstancesByStatusPage(ctx context.Context, status string, p repo.PageParams) ([]string, string, error) {
	ctx, c := w.t.start(ctx, opAdminListInstancesByStatusPage)
	out, next, err := w.gormProvider.ListInstancesByStatusPage(ctx, status, p)
	c.end(err)
	return out, next, err
}

// ListExecutionsPage implements duroxide.ProviderAdmin.
func (w *tracedProvider) ListExecutionsPage(ctx context.Context, instance string, p repo.PageParams) ([]uint64, string, error) {
	ctx, c := w.t.start(ctx, opAdminListExecutionsPage)
	c.instance(instance)
	out, next, err := w.gormProvider.ListExecutionsPage(ctx, instance, p)
	c.end(err)
	return out, next, err
}

// ReadHistoryWithExecutionID implements duroxide.ProviderAdmin.
func (w *tracedProvider) ReadHistoryWithExecutionID(ctx context.Context, instance string, executionID uint64) ([]duroxide.Event, error) {
	ctx, c := w.t.start(ctx, opAdminReadHistoryWithExecutionID)
	c.instance(instance)
	out, err := w.gormProvider.ReadHistoryWithExecutionID(ctx, instance, executionID)
	c.end(err)
	return out, err
}

// ReadHistory implements duroxide.ProviderAdmin.
func (w *tracedProvider) ReadHistory(ctx context.Context, instance string) ([]duroxide.Event, error) {
	ctx, c := w.t.start(ctx, opAdminReadHistory)
	c.instance(instance)
	out, err := w.gormProvider.ReadHistory(ctx, instance)
	c.end(err)
	return out, err
}

// LatestExecutionID implements duroxide.ProviderAdmin.
func (w *tracedProvider) LatestExecutionID(ctx context.Context, instance string) (uint64, error) {
	ctx, c := w.t.start(ctx, opAdminLatestExecutionID)
	c.instance(instance)
	out, err := w.gormProvider.LatestExecutionID(ctx, instance)
	c.end(err)
	return out, err
}

// GetInstanceInfo implements duroxide.ProviderAdmin.
func (w *tracedProvider) GetInstanceInfo(ctx context.Context, instance string) (*duroxide.InstanceInfo, error) {
	ctx, c := w.t.start(ctx, opAdminGetInstanceInfo)
	c.instance(instance)
	out, err := w.gormProvider.GetInstanceInfo(ctx, instance)
	c.end(err)
	return out, err
}

// GetExecutionInfo implements duroxide.ProviderAdmin.
func (w *tracedProvider) GetExecutionInfo(ctx context.Context, instance string, executionID uint64) (*duroxide.ExecutionInfo, error) {
	ctx, c := w.t.start(ctx, opAdminGetExecutionInfo)
	c.instance(instance)
	out, err := w.gormProvider.GetExecutionInfo(ctx, instance, executionID)
	c.end(err)
	return out, err
}

// GetSystemMetrics implements duroxide.ProviderAdmin.
func (w *tracedProvider) GetSystemMetrics(ctx context.Context) (*duroxide.SystemMetrics, error) {
	ctx, c := w.t.start(ctx, opAdminGetSystemMetrics)
	out, err := w.gormProvider.GetSystemMetrics(ctx)
	c.end(err)
	return out, err
}

// GetQueueDepths implements duroxide.ProviderAdmin.
func (w *tracedProvider) GetQueueDepths(ctx context.Context) (*duroxide.QueueDepths, error) {
	ctx, c := w.t.start(ctx, opAdminGetQueueDepths)
	out, err := w.gormProvider.GetQueueDepths(ctx)
	c.end(err)
	return out, err
}

// ListChildren implements duroxide.ProviderAdmin.
func (w *tracedProvider) ListChildren(ctx context.Context, instance string) ([]string, error) {
	ctx, c := w.t.start(ctx, opAdminListChildren)
	c.instance(instance)
	out, err := w.gormProvider.ListChildren(ctx, instance)
	c.end(err)
	return out, err
}

// GetParentID implements duroxide.ProviderAdmin.
func (w *tracedProvider) GetParentID(ctx context.Context, instance string) (string, error) {
	ctx, c := w.t.start(ctx, opAdminGetParentID)
	c.instance(instance)
	out, err := w.gormProvider.GetParentID(ctx, instance)
	c.end(err)
	return out, err
}

// GetInstanceTree implements duroxide.ProviderAdmin.
func (w *tracedProvider) GetInstanceTree(ctx context.Context, instance string) (*duroxide.InstanceTree, error) {
	ctx, c := w.t.start(ctx, opAdminGetInstanceTree)
	c.instance(instance)
	out, err := w.gormProvider.GetInstanceTree(ctx, instance)
	c.end(err)
	return out, err
}

// DeleteInstancesAtomic implements duroxide.ProviderAdmin.
func (w *tracedProvider) DeleteInstancesAtomic(ctx context.Context, ids []string, force bool) (duroxide.DeleteInstanceResult, error) {
	ctx, c := w.t.start(ctx, opAdminDeleteInstancesAtomic)
	out, err := w.gormProvider.DeleteInstancesAtomic(ctx, ids, force)
	c.end(err)
	return out, err
}

// DeleteInstance implements duroxide.ProviderAdmin.
func (w *tracedProvider) DeleteInstance(ctx context.Context, instance string, force bool) (duroxide.DeleteInstanceResult, error) {
	ctx, c := w.t.start(ctx, opAdminDeleteInstance)
	c.instance(instance)
	out, err := w.gormProvider.DeleteInstance(ctx, instance, force)
	c.end(err)
	return out, err
}

// DeleteInstanceBulk implements duroxide.ProviderAdmin.
func (w *tracedProvider) DeleteInstanceBulk(ctx context.Context, filter duroxide.InstanceFilter) (duroxide.DeleteInstanceResult, error) {
	ctx, c := w.t.start(ctx, opAdminDeleteInstanceBulk)
	out, err := w.gormProvider.DeleteInstanceBulk(ctx, filter)
	c.end(err)
	return out, err
}

// PruneExecutions implements duroxide.ProviderAdmin.
func (w *tracedProvider) PruneExecutions(ctx context.Context, instance string, opts duroxide.PruneOptions) (duroxide.PruneResult, error) {
	ctx, c := w.t.start(ctx, opAdminPruneExecutions)
	c.instance(instance)
	out, err := w.gormProvider.PruneExecutions(ctx, instance, opts)
	c.end(err)
	return out, err
}

// PruneExecutionsBulk implements duroxide.ProviderAdmin.
func (w *tracedProvider) PruneExecutionsBulk(ctx context.Context, filter duroxide.InstanceFilter, opts duroxide.PruneOptions) (duroxide.PruneResult, error) {
	ctx, c := w.t.start(ctx, opAdminPruneExecutionsBulk)
	out, err := w.gormProvider.PruneExecutionsBulk(ctx, filter, opts)
	c.end(err)
	return out, err
}

// GetSystemMetricsEstimate implements duroxide.ProviderAdminExt.
func (w *tracedProvider) GetSystemMetricsEstimate(ctx context.Context, opts duroxide.EstimateOptions) (*duroxide.SystemMetricsEstimate, error) {
	ctx, c := w.t.start(ctx, opAdminGetSystemMetricsEstimate)
	out, err := w.gormProvider.GetSystemMetricsEstimate(ctx, opts)
	c.end(err)
	return out, err
}

// GetQueueDepthsEstimate implements duroxide.ProviderAdminExt.
func (w *tracedProvider) GetQueueDepthsEstimate(ctx context.Context, opts duroxide.EstimateOptions) (*duroxide.QueueDepthsEstimate, error) {
	ctx, c := w.t.start(ctx, opAdminGetQueueDepthsEstimate)
	out, err := w.gormProvider.GetQueueDepthsEstimate(ctx, opts)
	c.end(err)
	return out, err
}

// ListChildrenPage implements duroxide.ProviderAdminExt.
func (w *tracedProvider) ListChildrenPage(ctx context.Context, instance string, p repo.PageParams) ([]string, string, error) {
	ctx, c := w.t.start(ctx, opAdminListChildrenPage)
	c.instance(instance)
	out, next, err := w.gormProvider.ListChildrenPage(ctx, instance, p)
	c.end(err)
	return out, next, err
}

// ReadHistoryPage implements duroxide.ProviderAdminExt.
func (w *tracedProvider) ReadHistoryPage(ctx context.Context, instance string, executionID uint64, p repo.PageParams) ([]duroxide.Event, string, error) {
	ctx, c := w.t.start(ctx, opAdminReadHistoryPage)
	c.instance(instance)
	out, next, err := w.gormProvider.ReadHistoryPage(ctx, instance, executionID, p)
	c.end(err)
	return out, next, err
}
