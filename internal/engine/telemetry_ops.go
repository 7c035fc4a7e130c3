package engine

import "github.com/agentstore/agentstore/models"

// opID names an instrumented repository method (index into opDefs).
type opID uint8

// The instrumented methods.
const (
	opSessSave opID = iota
	opSessLoad
	opSessDelete
	opSessList
	opSessListChildren
	opSessListChildrenPage
	opSessAppendMessages
	opSessAppendMessagesWith
	opSessWithSessionLock
	opSessFork
	opSessAddSummary
	opSessGetSummaries
	opSessGetSummariesPage
	opSessSetTodos
	opSessPlans
	opSessPlansPage
	opSessCleanupExpired
	opSessRewind
	opSessBranches
	opSessLoadBranch
	opSessSearch
	opQueueEnqueue
	opQueueEnqueueWith
	opQueueItem
	opQueueItems
	opQueueDequeue
	opQueueComplete
	opQueueFail
	opQueueRelease
	opQueueCancelQueued
	opQueuePendingQueue
	opQueuePendingQueuePage
	opQueuePurgeFinished
	opProvFetchOrchestrationItem
	opProvAckOrchestrationItem
	opProvAbandonOrchestrationItem
	opProvRenewOrchestrationItemLock
	opProvRead
	opProvReadWithExecution
	opProvAppendWithExecution
	opProvEnqueueForOrchestrator
	opProvEnqueueForWorker
	opProvFetchWorkItem
	opProvAckWorkItem
	opProvRenewWorkItemLock
	opProvAbandonWorkItem
	opProvRenewSessionLock
	opProvCleanupOrphanedSessions
	opProvGetCustomStatus
	opProvGetKVValue
	opProvGetKVAllValues
	opProvGetInstanceStats
	opAdminListInstances
	opAdminListInstancesByStatus
	opAdminListExecutions
	opAdminListInstancesPage
	opAdminListInstancesByStatusPage
	opAdminListExecutionsPage
	opAdminReadHistoryWithExecutionID
	opAdminReadHistory
	opAdminLatestExecutionID
	opAdminGetInstanceInfo
	opAdminGetExecutionInfo
	opAdminGetSystemMetrics
	opAdminGetQueueDepths
	opAdminListChildren
	opAdminGetParentID
	opAdminGetInstanceTree
	opAdminDeleteInstancesAtomic
	opAdminDeleteInstance
	opAdminDeleteInstanceBulk
	opAdminPruneExecutions
	opAdminPruneExecutionsBulk
	opAdminGetSystemMetricsEstimate
	opAdminGetQueueDepthsEstimate
	opAdminListChildrenPage
	opAdminReadHistoryPage
	opFeedChanges
	opFeedWatch
	opFeedPurgeChanges
)

// opDefs describes every instrumented method: its interface and name (the
// span name), its operation (db.operation.name, as in its errors' Op), the
// base name of its table (db.collection.name; "" for none) and, for calls
// that end a lease or lock, the queue (agentstore.lock.lost).
func opDefs() []opDef {
	return []opDef{
		opSessSave:                        {"Sessions", "Save", "save_session", models.TableSessions, ""},
		opSessLoad:                        {"Sessions", "Load", "load_session", models.TableSessions, ""},
		opSessDelete:                      {"Sessions", "Delete", "delete_session", models.TableSessions, ""},
		opSessList:                        {"Sessions", "List", "list_sessions", models.TableSessions, ""},
		opSessListChildren:                {"Sessions", "ListChildren", "list_children", models.TableSessions, ""},
		opSessListChildrenPage:            {"Sessions", "ListChildrenPage", "list_children_page", models.TableSessions, ""},
		opSessAppendMessages:              {"Sessions", "AppendMessages", "append_messages", models.TableMessages, ""},
		opSessAppendMessagesWith:          {"Sessions", "AppendMessagesWith", "append_messages", models.TableMessages, ""},
		opSessWithSessionLock:             {"Sessions", "WithSessionLock", "with_session_lock", models.TableSessions, ""},
		opSessFork:                        {"Sessions", "Fork", "fork_session", models.TableSessions, ""},
		opSessAddSummary:                  {"Sessions", "AddSummary", "add_summary", models.TableSummaries, ""},
		opSessGetSummaries:                {"Sessions", "GetSummaries", "get_summaries", models.TableSummaries, ""},
		opSessGetSummariesPage:            {"Sessions", "GetSummariesPage", "get_summaries_page", models.TableSummaries, ""},
		opSessSetTodos:                    {"Sessions", "SetTodos", "set_todos", models.TableTodos, ""},
		opSessPlans:                       {"Sessions", "Plans", "plans", models.TablePlans, ""},
		opSessPlansPage:                   {"Sessions", "PlansPage", "plans_page", models.TablePlans, ""},
		opSessCleanupExpired:              {"Sessions", "CleanupExpired", "cleanup_expired", models.TableSessions, ""},
		opSessRewind:                      {"Sessions", "Rewind", "rewind_session", models.TableSessions, ""},
		opSessBranches:                    {"Sessions", "Branches", "list_branches", models.TableMessages, ""},
		opSessLoadBranch:                  {"Sessions", "LoadBranch", "load_branch", models.TableMessages, ""},
		opSessSearch:                      {"Sessions", "Search", "search_messages", models.TableMessages, ""},
		opQueueEnqueue:                    {"SessionQueue", "Enqueue", "enqueue", models.TableQueue, ""},
		opQueueEnqueueWith:                {"SessionQueue", "EnqueueWith", "enqueue", models.TableQueue, ""},
		opQueueItem:                       {"SessionQueue", "Item", "queue_item", models.TableQueue, ""},
		opQueueItems:                      {"SessionQueue", "Items", "queue_items", models.TableQueue, ""},
		opQueueDequeue:                    {"SessionQueue", "Dequeue", "dequeue", models.TableQueue, ""},
		opQueueComplete:                   {"SessionQueue", "Complete", "complete", models.TableQueue, "session"},
		opQueueFail:                       {"SessionQueue", "Fail", "fail", models.TableQueue, "session"},
		opQueueRelease:                    {"SessionQueue", "Release", "release", models.TableQueue, "session"},
		opQueueCancelQueued:               {"SessionQueue", "CancelQueued", "cancel_queued", models.TableQueue, ""},
		opQueuePendingQueue:               {"SessionQueue", "PendingQueue", "pending_queue", models.TableQueue, ""},
		opQueuePendingQueuePage:           {"SessionQueue", "PendingQueuePage", "pending_queue_page", models.TableQueue, ""},
		opQueuePurgeFinished:              {"SessionQueue", "PurgeFinished", "purge_finished", models.TableQueue, ""},
		opProvFetchOrchestrationItem:      {"Provider", "FetchOrchestrationItem", "fetch_orchestration_item", models.TableOrchestratorQueue, ""},
		opProvAckOrchestrationItem:        {"Provider", "AckOrchestrationItem", "ack_orchestration_item", models.TableOrchestratorQueue, "orchestrator"},
		opProvAbandonOrchestrationItem:    {"Provider", "AbandonOrchestrationItem", "abandon_orchestration_item", models.TableOrchestratorQueue, "orchestrator"},
		opProvRenewOrchestrationItemLock:  {"Provider", "RenewOrchestrationItemLock", "renew_orchestration_item_lock", models.TableInstanceLocks, "orchestrator"},
		opProvRead:                        {"Provider", "Read", "read", models.TableHistory, ""},
		opProvReadWithExecution:           {"Provider", "ReadWithExecution", "read_with_execution", models.TableHistory, ""},
		opProvAppendWithExecution:         {"Provider", "AppendWithExecution", "append_with_execution", models.TableHistory, ""},
		opProvEnqueueForOrchestrator:      {"Provider", "EnqueueForOrchestrator", "enqueue_for_orchestrator", models.TableOrchestratorQueue, ""},
		opProvEnqueueForWorker:            {"Provider", "EnqueueForWorker", "enqueue_for_worker", models.TableWorkerQueue, ""},
		opProvFetchWorkItem:               {"Provider", "FetchWorkItem", "fetch_work_item", models.TableWorkerQueue, ""},
		opProvAckWorkItem:                 {"Provider", "AckWorkItem", "ack_work_item", models.TableWorkerQueue, "worker"},
		opProvRenewWorkItemLock:           {"Provider", "RenewWorkItemLock", "renew_work_item_lock", models.TableWorkerQueue, "worker"},
		opProvAbandonWorkItem:             {"Provider", "AbandonWorkItem", "abandon_work_item", models.TableWorkerQueue, "worker"},
		opProvRenewSessionLock:            {"Provider", "RenewSessionLock", "renew_session_lock", models.TableActivitySessions, ""},
		opProvCleanupOrphanedSessions:     {"Provider", "CleanupOrphanedSessions", "cleanup_orphaned_sessions", models.TableActivitySessions, ""},
		opProvGetCustomStatus:             {"Provider", "GetCustomStatus", "get_custom_status", models.TableInstances, ""},
		opProvGetKVValue:                  {"Provider", "GetKVValue", "get_kv_value", models.TableKVStore, ""},
		opProvGetKVAllValues:              {"Provider", "GetKVAllValues", "get_kv_all_values", models.TableKVStore, ""},
		opProvGetInstanceStats:            {"Provider", "GetInstanceStats", "get_instance_stats", models.TableInstances, ""},
		opAdminListInstances:              {"ProviderAdmin", "ListInstances", "list_instances", models.TableInstances, ""},
		opAdminListInstancesByStatus:      {"ProviderAdmin", "ListInstancesByStatus", "list_instances_by_status", models.TableInstances, ""},
		opAdminListExecutions:             {"ProviderAdmin", "ListExecutions", "list_executions", models.TableExecutions, ""},
		opAdminListInstancesPage:          {"ProviderAdmin", "ListInstancesPage", "list_instances_page", models.TableInstances, ""},
		opAdminListInstancesByStatusPage:  {"ProviderAdmin", "ListInstancesByStatusPage", "list_instances_by_status_page", models.TableInstances, ""},
		opAdminListExecutionsPage:         {"ProviderAdmin", "ListExecutionsPage", "list_executions_page", models.TableExecutions, ""},
		opAdminReadHistoryWithExecutionID: {"ProviderAdmin", "ReadHistoryWithExecutionID", "read_history_with_execution_id", models.TableHistory, ""},
		opAdminReadHistory:                {"ProviderAdmin", "ReadHistory", "read_history", models.TableHistory, ""},
		opAdminLatestExecutionID:          {"ProviderAdmin", "LatestExecutionID", "latest_execution_id", models.TableExecutions, ""},
		opAdminGetInstanceInfo:            {"ProviderAdmin", "GetInstanceInfo", "get_instance_info", models.TableInstances, ""},
		opAdminGetExecutionInfo:           {"ProviderAdmin", "GetExecutionInfo", "get_execution_info", models.TableExecutions, ""},
		opAdminGetSystemMetrics:           {"ProviderAdmin", "GetSystemMetrics", "get_system_metrics", "", ""},
		opAdminGetQueueDepths:             {"ProviderAdmin", "GetQueueDepths", "get_queue_depths", "", ""},
		opAdminListChildren:               {"ProviderAdmin", "ListChildren", "list_children", models.TableInstances, ""},
		opAdminGetParentID:                {"ProviderAdmin", "GetParentID", "get_parent_id", models.TableInstances, ""},
		opAdminGetInstanceTree:            {"ProviderAdmin", "GetInstanceTree", "get_instance_tree", models.TableInstances, ""},
		opAdminDeleteInstancesAtomic:      {"ProviderAdmin", "DeleteInstancesAtomic", "delete_instances_atomic", models.TableInstances, ""},
		opAdminDeleteInstance:             {"ProviderAdmin", "DeleteInstance", "delete_instance", models.TableInstances, ""},
		opAdminDeleteInstanceBulk:         {"ProviderAdmin", "DeleteInstanceBulk", "delete_instance_bulk", models.TableInstances, ""},
		opAdminPruneExecutions:            {"ProviderAdmin", "PruneExecutions", "prune_executions", models.TableExecutions, ""},
		opAdminPruneExecutionsBulk:        {"ProviderAdmin", "PruneExecutionsBulk", "prune_executions_bulk", models.TableExecutions, ""},
		opAdminGetSystemMetricsEstimate:   {"ProviderAdmin", "GetSystemMetricsEstimate", "get_system_metrics_estimate", "", ""},
		opAdminGetQueueDepthsEstimate:     {"ProviderAdmin", "GetQueueDepthsEstimate", "get_queue_depths_estimate", "", ""},
		opAdminListChildrenPage:           {"ProviderAdmin", "ListChildrenPage", "list_children_page", models.TableInstances, ""},
		opAdminReadHistoryPage:            {"ProviderAdmin", "ReadHistoryPage", "read_history_page", models.TableHistory, ""},
		opFeedChanges:                     {"ChangeFeed", "Changes", "changes", models.TableSessionChanges, ""},
		opFeedWatch:                       {"ChangeFeed", "Watch", "watch_changes", models.TableSessionChanges, ""},
		opFeedPurgeChanges:                {"ChangeFeed", "PurgeChanges", "purge_changes", models.TableSessionChanges, ""},
	}
}

// opDef describes one instrumented method (see opDefs).
type opDef struct{ iface, method, op, table, queue string }
