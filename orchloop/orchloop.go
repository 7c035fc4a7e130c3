// Package orchloop is a minimal durable-orchestration replay loop written
// only against duroxide.Provider: no framework, no coroutines. Each turn it
// fetches an instance, turns the fetched messages into history events,
// re-runs the orchestration function from the start over the whole history
// (replay), and acks the new events together with the activities, timers
// and sub-orchestrations the function scheduled (key-value writes are events
// of the delta too; see Ctx.SetKV). Workers fetch activities,
// run them and ack the completion. It backs examples/orchestration and the
// provider's concurrency tests; it is not a production runtime.
package orchloop

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// Orchestration is a deterministic orchestration function. It is re-run
// from the start on every turn; calls on c return done=false while their
// result is not in the history yet, and the function should then return
// done=false too. Returning a non-nil error fails the orchestration.
type Orchestration func(c *Ctx, input string) (output string, done bool, err error)

// Activity is a unit of work run by a worker.
type Activity func(ctx context.Context, input string) (string, error)

// Engine runs orchestrator and worker loops over a provider.
type Engine struct {
	P              duroxide.Provider
	Orchestrations map[string]Orchestration
	Activities     map[string]Activity
	LockTimeout    time.Duration    // default 30 s
	PollTimeout    time.Duration    // default 200 ms
	Version        string           // orchestration version, default "1.0.0"
	Now            func() time.Time // clock for timers, default time.Now
	// Log, if set, receives one line per notable step.
	Log func(format string, args ...any)

	mu    sync.Mutex
	stats Stats
}

// Stats counts what an Engine did.
type Stats struct {
	Turns, Activities, Retries int64
}

// Stats returns the counters so far.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stats
}

func (e *Engine) count(f func(*Stats)) {
	e.mu.Lock()
	f(&e.stats)
	e.mu.Unlock()
}

func (e *Engine) lock() time.Duration {
	if e.LockTimeout > 0 {
		return e.LockTimeout
	}
	return 30 * time.Second
}

func (e *Engine) poll() time.Duration {
	if e.PollTimeout > 0 {
		return e.PollTimeout
	}
	return 200 * time.Millisecond
}

func (e *Engine) version() string {
	if e.Version != "" {
		return e.Version
	}
	return "1.0.0"
}

func (e *Engine) now() time.Time {
	if e.Now != nil {
		return e.Now()
	}
	return time.Now()
}

func (e *Engine) logf(format string, args ...any) {
	if e.Log != nil {
		e.Log(format, args...)
	}
}

// Start enqueues a new orchestration instance.
func (e *Engine) Start(ctx context.Context, instance, orchestration, input string) error {
	v := e.version()
	return e.P.EnqueueForOrchestrator(ctx, &duroxide.StartOrchestration{Instance: instance, Orchestration: orchestration,
		Input: input, Version: &v, ExecutionID: 1}, 0)
}

// RunOrchestrator processes orchestration turns until ctx ends. Retryable
// provider errors are retried; a permanent error stops the loop.
func (e *Engine) RunOrchestrator(ctx context.Context) error {
	return e.loop(ctx, e.OrchestrationTurn)
}

// RunWorker processes activities until ctx ends, like RunOrchestrator.
func (e *Engine) RunWorker(ctx context.Context) error {
	return e.loop(ctx, e.WorkTurn)
}

func (e *Engine) loop(ctx context.Context, turn func(context.Context) (bool, error)) error {
	for ctx.Err() == nil {
		_, err := turn(ctx)
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, repo.ErrRetryable) {
			e.count(func(s *Stats) { s.Retries++ })
			time.Sleep(10 * time.Millisecond)
			continue
		}
		return err
	}
	return nil
}

// WorkTurn runs at most one activity; it reports whether it found one.
func (e *Engine) WorkTurn(ctx context.Context) (bool, error) {
	lease, err := e.P.FetchWorkItem(ctx, e.lock(), e.poll(), nil, duroxide.TagFilter{})
	if err != nil || lease == nil {
		return false, err
	}
	ae, ok := lease.Item.(*duroxide.ActivityExecute)
	if !ok {
		return true, e.P.AckWorkItem(ctx, lease.LockToken, nil)
	}
	var completion duroxide.WorkItem
	fn := e.Activities[ae.Name]
	var res string
	if fn == nil {
		err = fmt.Errorf("no activity %q registered", ae.Name)
	} else {
		res, err = fn(ctx, ae.Input)
	}
	if err != nil {
		completion = &duroxide.ActivityFailed{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID,
			Details: duroxide.ErrorDetails{Application: &duroxide.ApplicationError{Kind: duroxide.AppErrorKind{Name: "ActivityFailed"}, Message: err.Error()}}}
	} else {
		completion = &duroxide.ActivityCompleted{Instance: ae.Instance, ExecutionID: ae.ExecutionID, ID: ae.ID, Result: res}
	}
	e.logf("worker: %s ran %s(%q) -> %q", ae.Instance, ae.Name, ae.Input, res)
	e.count(func(s *Stats) { s.Activities++ })
	err = e.P.AckWorkItem(ctx, lease.LockToken, completion)
	if errors.Is(err, duroxide.ErrInvalidLockToken) {
		e.logf("worker: activity %s/%d was cancelled or lost", ae.Instance, ae.ID)
		return true, nil
	}
	return true, err
}

// OrchestrationTurn processes at most one orchestration turn; it reports
// whether it found one.
func (e *Engine) OrchestrationTurn(ctx context.Context) (bool, error) {
	it, err := e.P.FetchOrchestrationItem(ctx, e.lock(), e.poll(), nil)
	if err != nil || it == nil {
		return false, err
	}
	ack, err := e.turn(it)
	if err == nil {
		err = e.P.AckOrchestrationItem(ctx, it.LockToken, ack)
	}
	if err != nil {
		if aerr := e.P.AbandonOrchestrationItem(context.WithoutCancel(ctx), it.LockToken, 50*time.Millisecond, false); aerr != nil {
			e.logf("orchestrator: abandon %s: %v", it.Instance, aerr)
		}
		return true, fmt.Errorf("turn of %s: %w", it.Instance, err)
	}
	e.count(func(s *Stats) { s.Turns++ })
	return true, nil
}

// turn computes the ack of one fetched item.
func (e *Engine) turn(it *duroxide.OrchestrationItem) (duroxide.OrchestrationAck, error) {
	ack := duroxide.OrchestrationAck{ExecutionID: it.ExecutionID}
	if it.HistoryError != "" {
		ack.Metadata.Status, ack.Metadata.Output = ptr(duroxide.StatusFailed), ptr(it.HistoryError)
		return ack, nil
	}
	c := &Ctx{instance: it.Instance, exec: it.ExecutionID, now: e.now(), version: e.version(), kv: map[string]string{}}
	for k, v := range it.KVSnapshot {
		c.kv[k] = v.Value
	}
	for _, ev := range it.History {
		c.nextID = max(c.nextID, ev.EventID)
	}
	c.nextID++
	c.events = append(c.events, it.History...)
	var started *duroxide.OrchestrationStartedEvent
	terminal := false
	for _, ev := range it.History {
		switch k := ev.Kind.(type) {
		case *duroxide.OrchestrationStartedEvent:
			started = k
		case *duroxide.OrchestrationCompletedEvent, *duroxide.OrchestrationFailedEvent:
			terminal = true
		}
	}
	if terminal { // late messages for a finished instance: drop them
		return ack, nil
	}
	for _, m := range it.Messages {
		switch m := m.(type) {
		case *duroxide.StartOrchestration:
			if started == nil {
				started = &duroxide.OrchestrationStartedEvent{Name: m.Orchestration, Version: deref(m.Version, e.version()), Input: m.Input,
					ParentInstance: m.ParentInstance, ParentID: m.ParentID}
				c.add(started, nil)
			}
		case *duroxide.ActivityCompleted:
			if m.ExecutionID == it.ExecutionID {
				c.add(&duroxide.ActivityCompletedEvent{Result: m.Result}, ptr(m.ID))
			}
		case *duroxide.ActivityFailed:
			if m.ExecutionID == it.ExecutionID {
				c.add(&duroxide.ActivityFailedEvent{Details: m.Details}, ptr(m.ID))
			}
		case *duroxide.TimerFired:
			if m.ExecutionID == it.ExecutionID {
				c.add(&duroxide.TimerFiredEvent{FireAtMS: m.FireAtMS}, ptr(m.ID))
			}
		case *duroxide.SubOrchCompleted:
			c.add(&duroxide.SubOrchestrationCompletedEvent{Result: m.Result}, ptr(m.ParentID))
		case *duroxide.SubOrchFailed:
			c.add(&duroxide.SubOrchestrationFailedEvent{Details: m.Details}, ptr(m.ParentID))
		}
	}
	if started == nil { // messages for an instance that never started
		return ack, nil
	}
	fn := e.Orchestrations[started.Name]
	var out string
	var done bool
	var ferr error
	if fn == nil {
		ferr = fmt.Errorf("no orchestration %q registered", started.Name)
	} else {
		out, done, ferr = fn(c, started.Input)
		if c.nondeterminism != "" {
			ferr = errors.New("nondeterminism: " + c.nondeterminism)
		}
	}
	md := duroxide.ExecutionMetadata{Status: ptr(duroxide.StatusRunning), OrchestrationName: ptr(started.Name),
		OrchestrationVersion: ptr(started.Version), ParentInstanceID: started.ParentInstance}
	switch {
	case ferr != nil:
		details := duroxide.ErrorDetails{Application: &duroxide.ApplicationError{Kind: duroxide.AppErrorKind{Name: "OrchestrationFailed"}, Message: ferr.Error()}}
		c.add(&duroxide.OrchestrationFailedEvent{Details: details}, nil)
		md.Status, md.Output = ptr(duroxide.StatusFailed), ptr(ferr.Error())
		if started.ParentInstance != nil && started.ParentID != nil {
			c.orch = append(c.orch, &duroxide.SubOrchFailed{ParentInstance: *started.ParentInstance, ParentID: *started.ParentID, Details: details})
		}
		e.logf("orchestrator: %s failed: %v", it.Instance, ferr)
	case done:
		c.add(&duroxide.OrchestrationCompletedEvent{Output: out}, nil)
		md.Status, md.Output = ptr(duroxide.StatusCompleted), ptr(out)
		if started.ParentInstance != nil && started.ParentID != nil {
			c.orch = append(c.orch, &duroxide.SubOrchCompleted{ParentInstance: *started.ParentInstance, ParentID: *started.ParentID, Result: out})
		}
		e.logf("orchestrator: %s completed -> %q", it.Instance, out)
	default:
		e.logf("orchestrator: %s turn: %d new events, %d activities, %d orchestrator messages", it.Instance, len(c.delta), len(c.work), len(c.orch))
	}
	ack.HistoryDelta, ack.WorkerItems, ack.OrchestratorItems, ack.Metadata = c.delta, c.work, c.orch, md
	return ack, nil
}

// Ctx is what an Orchestration sees during one replay.
type Ctx struct {
	instance string
	exec     uint64
	now      time.Time
	version  string
	events   []duroxide.Event // history + delta so far
	delta    []duroxide.Event
	work     []duroxide.WorkItem
	orch     []duroxide.WorkItem
	nextID   uint64
	seq      int // index of the next scheduling call
	kvSeq    int // index of the next key-value call
	// kv is the instance's key-value state as this replay sees it: the
	// fetch's snapshot (completed executions) updated by every KV call
	// of the orchestration so far, replayed or new.
	kv map[string]string

	nondeterminism string
}

// ErrKVLimit is returned by Ctx.SetKV for a value over
// duroxide.MaxKVValueBytes or a new key beyond duroxide.MaxKVKeys.
var ErrKVLimit = errors.New("orchloop: key-value limit")

// kvCall records (once) the kvSeq-th key-value event of the execution: in
// replay it checks the recorded event is the same call (else the turn
// fails as nondeterministic), otherwise it appends k to the delta.
func (c *Ctx) kvCall(k duroxide.EventKind, same func(duroxide.EventKind) bool) {
	n := 0
	for _, e := range c.events {
		switch e.Kind.(type) {
		case *duroxide.KeyValueSetEvent, *duroxide.KeyValueClearedEvent, *duroxide.KeyValuesClearedEvent:
			if n == c.kvSeq {
				c.kvSeq++
				if !same(e.Kind) && c.nondeterminism == "" {
					c.nondeterminism = fmt.Sprintf("key-value call %d is %s, history has %s", n, k.EventType(), e.Kind.EventType())
				}
				return
			}
			n++
		}
	}
	c.kvSeq++
	c.add(k, nil)
}

// SetKV sets key to value in the instance's key-value store (recorded as a
// KeyValueSet event; visible to KV at once, to other turns through replay
// and to GetKVValue after the ack, merged into the store when the
// execution ends). It refuses, with ErrKVLimit and nothing recorded, a
// value over duroxide.MaxKVValueBytes or a new key when the instance
// already has duroxide.MaxKVKeys keys.
func (c *Ctx) SetKV(key, value string) error {
	if _, exists := c.kv[key]; len(value) > duroxide.MaxKVValueBytes || (!exists && len(c.kv) >= duroxide.MaxKVKeys) {
		return fmt.Errorf("%w: key %q (%d bytes, %d keys)", ErrKVLimit, key, len(value), len(c.kv))
	}
	c.kvCall(&duroxide.KeyValueSetEvent{Key: key, Value: value, LastUpdatedAtMS: uint64(c.now.UnixMilli())}, func(h duroxide.EventKind) bool {
		r, ok := h.(*duroxide.KeyValueSetEvent)
		return ok && r.Key == key && r.Value == value
	})
	c.kv[key] = value
	return nil
}

// ClearKV removes key from the instance's key-value store (a
// KeyValueCleared event).
func (c *Ctx) ClearKV(key string) {
	c.kvCall(&duroxide.KeyValueClearedEvent{Key: key}, func(h duroxide.EventKind) bool {
		r, ok := h.(*duroxide.KeyValueClearedEvent)
		return ok && r.Key == key
	})
	delete(c.kv, key)
}

// ClearAllKV removes every key of the instance (a KeyValuesCleared event).
func (c *Ctx) ClearAllKV() {
	c.kvCall(&duroxide.KeyValuesClearedEvent{}, func(h duroxide.EventKind) bool {
		_, ok := h.(*duroxide.KeyValuesClearedEvent)
		return ok
	})
	clear(c.kv)
}

// KV returns the value of key as the orchestration sees it at this point
// of the replay (ok false if the key has none).
func (c *Ctx) KV(key string) (value string, ok bool) {
	value, ok = c.kv[key]
	return value, ok
}

// Instance returns the orchestration instance id.
func (c *Ctx) Instance() string { return c.instance }

func (c *Ctx) add(k duroxide.EventKind, source *uint64) duroxide.Event {
	ev := duroxide.Event{EventID: c.nextID, SourceEventID: source, InstanceID: c.instance, ExecutionID: c.exec,
		TimestampMS: uint64(c.now.UnixMilli()), DuroxideVersion: "agentstore-orchloop", Kind: k}
	c.nextID++
	c.events = append(c.events, ev)
	c.delta = append(c.delta, ev)
	return ev
}

// schedule returns the seq-th scheduling event, creating it with mk when
// the history has none yet (new = true).
func (c *Ctx) schedule(mk func() duroxide.EventKind) (ev duroxide.Event, isNew bool) {
	n := 0
	for _, e := range c.events {
		switch e.Kind.(type) {
		case *duroxide.ActivityScheduledEvent, *duroxide.TimerCreatedEvent, *duroxide.SubOrchestrationScheduledEvent:
			if n == c.seq {
				c.seq++
				want := mk()
				if want.EventType() != e.Kind.EventType() && c.nondeterminism == "" {
					c.nondeterminism = fmt.Sprintf("call %d is %s, history has %s", n, want.EventType(), e.Kind.EventType())
				}
				return e, false
			}
			n++
		}
	}
	c.seq++
	return c.add(mk(), nil), true
}

func (c *Ctx) completion(id uint64) *duroxide.Event {
	for i := range c.events {
		if s := c.events[i].SourceEventID; s != nil && *s == id {
			return &c.events[i]
		}
	}
	return nil
}

// Activity schedules (once) the activity name(input) and returns its result
// once it completed; err is set if it failed.
func (c *Ctx) Activity(name, input string) (result string, done bool, err error) {
	ev, isNew := c.schedule(func() duroxide.EventKind { return &duroxide.ActivityScheduledEvent{Name: name, Input: input} })
	if isNew {
		c.work = append(c.work, &duroxide.ActivityExecute{Instance: c.instance, ExecutionID: c.exec, ID: ev.EventID, Name: name, Input: input})
		return "", false, nil
	}
	switch k := kindOf(c.completion(ev.EventID)).(type) {
	case *duroxide.ActivityCompletedEvent:
		return k.Result, true, nil
	case *duroxide.ActivityFailedEvent:
		return "", true, errors.New(k.Details.Message())
	}
	return "", false, nil
}

// Timer starts (once) a durable timer of d and reports whether it fired.
func (c *Ctx) Timer(d time.Duration) bool {
	fire := uint64(c.now.Add(d).UnixMilli())
	ev, isNew := c.schedule(func() duroxide.EventKind { return &duroxide.TimerCreatedEvent{FireAtMS: fire} })
	if isNew {
		c.orch = append(c.orch, &duroxide.TimerFired{Instance: c.instance, ExecutionID: c.exec, ID: ev.EventID, FireAtMS: fire})
		return false
	}
	_, ok := kindOf(c.completion(ev.EventID)).(*duroxide.TimerFiredEvent)
	return ok
}

// SubOrchestration starts (once) the child orchestration name(input) and
// returns its output once it completed; err is set if it failed.
func (c *Ctx) SubOrchestration(name, input string) (output string, done bool, err error) {
	child := ""
	ev, isNew := c.schedule(func() duroxide.EventKind {
		child = c.instance + "::sub::" + strconv.FormatUint(c.nextID, 10)
		return &duroxide.SubOrchestrationScheduledEvent{Name: name, Instance: child, Input: input}
	})
	if isNew {
		c.orch = append(c.orch, &duroxide.StartOrchestration{Instance: child, Orchestration: name, Input: input, Version: ptr(c.version),
			ParentInstance: ptr(c.instance), ParentID: ptr(ev.EventID), ExecutionID: 1})
		return "", false, nil
	}
	switch k := kindOf(c.completion(ev.EventID)).(type) {
	case *duroxide.SubOrchestrationCompletedEvent:
		return k.Result, true, nil
	case *duroxide.SubOrchestrationFailedEvent:
		return "", true, errors.New(k.Details.Message())
	}
	return "", false, nil
}

func kindOf(ev *duroxide.Event) duroxide.EventKind {
	if ev == nil {
		return nil
	}
	return ev.Kind
}

func ptr[T any](v T) *T { return &v }

func deref(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

// Wait polls admin until every instance reached a terminal status and
// returns their infos in order.
func Wait(ctx context.Context, admin duroxide.ProviderAdmin, instances []string, every time.Duration) ([]*duroxide.InstanceInfo, error) {
	out := make([]*duroxide.InstanceInfo, len(instances))
	for i := 0; i < len(instances); {
		info, err := admin.GetInstanceInfo(ctx, instances[i])
		switch {
		case err == nil && duroxide.IsTerminalStatus(info.Status):
			out[i] = info
			i++
			continue
		case err != nil && !errors.Is(err, repo.ErrNotFound) && !errors.Is(err, repo.ErrRetryable):
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for %s: %w", instances[i], ctx.Err())
		case <-time.After(every):
		}
	}
	return out, nil
}
