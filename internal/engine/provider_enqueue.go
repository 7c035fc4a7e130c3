package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

func validateWorkItem(item duroxide.WorkItem) error {
	if item == nil {
		return invalidf("nil work item")
	}
	if item.RoutingInstance() == "" {
		return invalidf("%s: empty instance", item.WorkItemType())
	}
	return checkUTF8(item.WorkItemType(), item)
}

// checkUTF8 refuses values holding strings that are not valid UTF-8: JSON
// encoding would silently replace the bytes with U+FFFD, so they could not
// be read back exactly. It walks exported fields, pointers, interfaces and
// slices.
func checkUTF8(what string, v any) error {
	bad := false
	var walk func(rv reflect.Value)
	walk = func(rv reflect.Value) {
		if bad {
			return
		}
		switch rv.Kind() {
		case reflect.String:
			bad = !utf8.ValidString(rv.String())
		case reflect.Pointer, reflect.Interface:
			if !rv.IsNil() {
				walk(rv.Elem())
			}
		case reflect.Struct:
			for i := range rv.NumField() {
				if rv.Type().Field(i).IsExported() {
					walk(rv.Field(i))
				}
			}
		case reflect.Slice, reflect.Array:
			for i := range rv.Len() {
				walk(rv.Index(i))
			}
		}
	}
	walk(reflect.ValueOf(v))
	if bad {
		return invalidf("%s: string is not valid UTF-8", what)
	}
	return nil
}

// EnqueueForOrchestrator implements duroxide.Provider.
func (p *gormProvider) EnqueueForOrchestrator(ctx context.Context, item duroxide.WorkItem, delay time.Duration) error {
	const op = "enqueue_for_orchestrator"
	if err := validateWorkItem(item); err != nil {
		return perr(op, err)
	}
	if _, ok := item.(*duroxide.ActivityExecute); ok {
		return perr(op, invalidf("ActivityExecute belongs to the worker queue"))
	}
	if delay < 0 {
		return perr(op, invalidf("negative delay"))
	}
	data, err := json.Marshal(item)
	if err != nil {
		return perr(op, invalidf("encode work item: %v", err))
	}
	now := p.s.nowMS()
	visible := now + durMS(delay)
	if tf, ok := item.(*duroxide.TimerFired); ok && tf.FireAtMS > 0 {
		visible = int64(tf.FireAtMS)
		if delay > 0 {
			visible = max(visible, now+durMS(delay))
		}
	}
	// one INSERT of the row's columns, as Create(&models.OrchestratorQueueItem{...})
	// writes them, without gorm's per-call reflection (see queryDirect)
	if err := execDirect(p.s.db.WithContext(ctx), `INSERT INTO `+p.q(models.TableOrchestratorQueue)+
		` (instance_id, work_item, visible_at, created_at, attempt_count) VALUES (?, ?, ?, ?, 0)`,
		item.RoutingInstance(), string(data), visible, now); err != nil {
		return perr(op, fmt.Errorf("enqueue %s for %s: %w", item.WorkItemType(), item.RoutingInstance(), dbErr(err)))
	}
	if visible <= now {
		p.orch.handOff(1, false) // one instance's message, claimable at once unless its instance is locked
	} else {
		p.orch.notify() // a new due time: every waiting fetch asks again
	}
	return nil
}

// notifyOrch wakes the orchestrator fetchers for rows, just enqueued: one
// waiting plain fetcher per instance when every row is visible at once
// (signal.handOff), else every waiting fetcher (a row visible later is a
// new due time).
func (p *gormProvider) notifyOrch(rows []models.OrchestratorQueueItem, now int64) {
	instances := make(map[string]struct{}, len(rows))
	for i := range rows {
		if rows[i].VisibleAt > now {
			p.orch.notify()
			return
		}
		instances[rows[i].InstanceID] = struct{}{}
	}
	if len(instances) > 0 {
		p.orch.handOff(len(instances), false)
	}
}

// orchRows builds the orchestrator-queue rows of items (ActivityExecute refused).
func orchRows(items []duroxide.WorkItem, now int64) ([]models.OrchestratorQueueItem, error) {
	rows := make([]models.OrchestratorQueueItem, 0, len(items))
	for _, it := range items {
		if err := validateWorkItem(it); err != nil {
			return nil, err
		}
		if _, ok := it.(*duroxide.ActivityExecute); ok {
			return nil, invalidf("ActivityExecute in orchestrator items")
		}
		data, err := json.Marshal(it)
		if err != nil {
			return nil, invalidf("encode %s: %v", it.WorkItemType(), err)
		}
		visible := now
		if tf, ok := it.(*duroxide.TimerFired); ok && tf.FireAtMS > 0 {
			visible = int64(tf.FireAtMS)
		}
		rows = append(rows, models.OrchestratorQueueItem{InstanceID: it.RoutingInstance(), WorkItem: string(data), VisibleAt: visible, CreatedAt: now})
	}
	return rows, nil
}

// workerRows builds worker-queue rows, copying the activity identity,
// session and tag of ActivityExecute items into their columns.
func workerRows(items []duroxide.WorkItem, now int64) ([]models.WorkerQueueItem, error) {
	rows := make([]models.WorkerQueueItem, 0, len(items))
	for _, it := range items {
		if err := validateWorkItem(it); err != nil {
			return nil, err
		}
		data, err := json.Marshal(it)
		if err != nil {
			return nil, invalidf("encode %s: %v", it.WorkItemType(), err)
		}
		// instance_id is the worker queue's distribution column (V13, NOT
		// NULL): an item that is not an activity of an instance gets "".
		r := models.WorkerQueueItem{WorkItem: string(data), VisibleAt: now, CreatedAt: now, InstanceID: ptr("")}
		if ae, ok := it.(*duroxide.ActivityExecute); ok {
			r.InstanceID = ptr(ae.Instance)
			r.ExecutionID = ptr(int64(ae.ExecutionID))
			r.ActivityID = ptr(int64(ae.ID))
			r.SessionID = ae.SessionID
			r.Tag = ae.Tag
		}
		rows = append(rows, r)
	}
	return rows, nil
}
