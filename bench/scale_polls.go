package main

// The poll rows of -scale (issue 24, item 6): a poll that finds nothing
// must cost what it costs on an empty queue, however many rows the queue
// holds that the poll may not take. Each N gets a second store holding N
// rows of every kind a plain poll must pass over: untagged work visible
// only tomorrow, tagged work, work bound to an activity session, and
// orchestrator messages visible only tomorrow. The rows timed are an
// untagged, session-less FetchWorkItem and a FetchOrchestrationItem, both
// returning nothing.

import (
	"errors"
	"fmt"
	"time"

	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// pollRuns opens and seeds the poll store of N and adds its runs; the
// store is closed and dropped by the cleanup it appends to e.cleanups.
func (e *scaleEnv) pollRuns(n int, add func(key string, reps int, setup, op func() error)) error {
	st, cleanup, err := e.b.openStore(e.ctx, e.d, fmt.Sprintf("scale_poll_%d", n), "")
	if err != nil {
		return err
	}
	e.cleanups = append(e.cleanups, cleanup)
	pe := &scaleEnv{b: e.b, d: e.d, ctx: e.ctx, st: st}
	tomorrow := time.Now().Add(24 * time.Hour).UnixMilli()
	yesterday := time.Now().Add(-24 * time.Hour).UnixMilli()
	work := func(visible int64, tag, session any) func(int) []any {
		return func(i int) []any {
			return []any{`{"ActivityExecute":{"instance":"x","execution_id":1,"id":1,"name":"a","input":""}}`, visible + int64(i), yesterday, 0, tag, session, "x"}
		}
	}
	// instance_id: the item's instance (NOT NULL on MariaDB, where it is
	// part of the primary key since V13)
	cols := []string{"work_item", "visible_at", "created_at", "attempt_count", "tag", "session_id", "instance_id"}
	for _, fill := range []func(int) []any{
		work(tomorrow, nil, nil),
		work(yesterday, "gpu", nil),
		func(i int) []any { return work(yesterday, nil, fmt.Sprintf("s-%d", i%100))(i) },
	} {
		if err := pe.insertRows(models.TableWorkerQueue, cols, n, fill); err != nil {
			return err
		}
	}
	if err := pe.insertRows(models.TableOrchestratorQueue, oqCols, n, func(i int) []any {
		return []any{fmt.Sprintf("f-%d", i), `{"ExternalRaised":{"instance":"x","name":"x","data":""}}`, tomorrow + int64(i), yesterday, 0}
	}); err != nil {
		return err
	}
	if err := pe.analyze(); err != nil {
		return err
	}
	p := st.Provider()
	add("poll_work_nothing_eligible", 25, nil, func() error {
		l, err := p.FetchWorkItem(e.ctx, time.Minute, 0, nil, duroxide.TagFilter{})
		if err == nil && l != nil {
			err = errors.New("the poll took an item it may not take")
		}
		return err
	})
	add("poll_orch_nothing_eligible", 25, nil, func() error {
		it, err := p.FetchOrchestrationItem(e.ctx, time.Minute, 0, nil)
		if err == nil && it != nil {
			err = errors.New("the poll took a message visible tomorrow")
		}
		return err
	})
	return nil
}
