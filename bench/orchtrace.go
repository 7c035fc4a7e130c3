package main

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore/repo/duroxide"
)

// orchTrace (BENCH_ORCH_TRACE=1) breaks one agentstore orchestration
// round's wall time down: each provider call's time (split into time in
// SQL statements and the rest: long-poll waits, Go), empty fetches, and
// per workflow the latency of each stage from its start to the waiter
// seeing it done. A diagnostic: it costs time itself (a statement logger,
// a clock read per call).
type orchTrace struct {
	t0    time.Time
	seq   atomic.Int64
	mu    sync.Mutex
	calls map[string]*callStat
	stmts map[string]*callStat
	// per instance: stage times since t0
	stages map[string]*[nStages]time.Duration
}

const (
	stStart = iota
	stFetch1
	stAck1
	stWork
	stWorkAck
	stFetch2
	stAck2
	stSeen
	nStages
)

var stageNames = [nStages]string{"start", "fetch1", "ack1", "work fetch", "work ack", "fetch2", "ack2", "seen"}

type callStat struct {
	n, empty   int64
	total, sql time.Duration
}

type traceKey struct{}

// callAcc accumulates the statement time of one provider call.
type callAcc struct{ sql time.Duration }

func newOrchTrace() *orchTrace {
	return &orchTrace{calls: map[string]*callStat{}, stmts: map[string]*callStat{}, stages: map[string]*[nStages]time.Duration{}}
}

func (t *orchTrace) stage(inst string, st int, at time.Time) {
	t.mu.Lock()
	s := t.stages[inst]
	if s == nil {
		s = &[nStages]time.Duration{}
		t.stages[inst] = s
	}
	if s[st] == 0 {
		s[st] = at.Sub(t.t0)
	}
	t.mu.Unlock()
}

func (t *orchTrace) call(ctx context.Context, op string, fn func(ctx context.Context) bool) {
	acc := &callAcc{}
	c0 := time.Now()
	empty := fn(context.WithValue(ctx, traceKey{}, acc))
	el := time.Since(c0)
	t.mu.Lock()
	cs := t.calls[op]
	if cs == nil {
		cs = &callStat{}
		t.calls[op] = cs
	}
	cs.n++
	if empty {
		cs.empty++
	}
	cs.total += el
	cs.sql += acc.sql
	t.mu.Unlock()
}

// LogMode, Info, Warn, Error, Trace: a gorm logger that sums statement
// time per statement shape and per provider call.
func (t *orchTrace) LogMode(logger.LogLevel) logger.Interface { return t }
func (t *orchTrace) Info(context.Context, string, ...any)     {}
func (t *orchTrace) Warn(context.Context, string, ...any)     {}
func (t *orchTrace) Error(context.Context, string, ...any)    {}
func (t *orchTrace) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), _ error) {
	el := time.Since(begin)
	if acc, ok := ctx.Value(traceKey{}).(*callAcc); ok {
		acc.sql += el
	}
	// fc formats the statement with its arguments (costly): only every
	// stmtSample-th statement is classified, its counts scaled up
	if t.seq.Add(1)%stmtSample != 0 {
		return
	}
	q, _ := fc()
	k := q
	if len(k) > 70 {
		k = k[:70]
	}
	el *= stmtSample
	t.mu.Lock()
	cs := t.stmts[k]
	if cs == nil {
		cs = &callStat{}
		t.stmts[k] = cs
	}
	cs.n += stmtSample
	cs.total += el
	t.mu.Unlock()
}

// stmtSample: one statement in stmtSample is classified by its text.
const stmtSample = 8

func (t *orchTrace) report(logf func(string, ...any), n int, wall time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	logf("   trace: %d wf in %v (%.2f ms/wf wall)", n, wall.Round(time.Millisecond), float64(wall.Microseconds())/1000/float64(n))
	ops := make([]string, 0, len(t.calls))
	for k := range t.calls {
		ops = append(ops, k)
	}
	sort.Strings(ops)
	for _, op := range ops {
		c := t.calls[op]
		logf("   trace call %-22s %6.2f/wf (empty %5.2f/wf) total %8v (%6.3f ms/wf) sql %8v, other %8v, mean %v",
			op, float64(c.n)/float64(n), float64(c.empty)/float64(n), c.total.Round(time.Millisecond),
			float64(c.total.Microseconds())/1000/float64(n), c.sql.Round(time.Millisecond),
			(c.total - c.sql).Round(time.Millisecond), (c.total / time.Duration(max(c.n, 1))).Round(time.Microsecond))
	}
	type kv struct {
		k string
		c *callStat
	}
	var sts []kv
	for k, c := range t.stmts {
		sts = append(sts, kv{k, c})
	}
	slices.SortFunc(sts, func(a, b kv) int { return int(b.c.total - a.c.total) })
	for i, s := range sts {
		if i >= 14 {
			break
		}
		logf("   trace stmt %5.2f/wf mean %7v total %8v  %s", float64(s.c.n)/float64(n),
			(s.c.total / time.Duration(max(s.c.n, 1))).Round(time.Microsecond), s.c.total.Round(time.Millisecond),
			strings.Join(strings.Fields(s.k), " "))
	}
	// stage latencies: median and p90 of each step over the instances
	var d [nStages][]time.Duration
	for _, s := range t.stages {
		for i := 1; i < nStages; i++ {
			if s[i] != 0 && s[i-1] != 0 {
				d[i] = append(d[i], s[i]-s[i-1])
			}
		}
	}
	var b strings.Builder
	for i := 1; i < nStages; i++ {
		v := d[i]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		var sum time.Duration
		for _, x := range v {
			sum += x
		}
		fmt.Fprintf(&b, " %s->%s mean %v p50 %v p90 %v;", stageNames[i-1], stageNames[i], (sum / time.Duration(len(v))).Round(10*time.Microsecond),
			v[len(v)/2].Round(10*time.Microsecond), v[len(v)*9/10].Round(10*time.Microsecond))
	}
	logf("   trace stages:%s", b.String())
}

// tracedProvider records the calls of the orchestration loops and the
// waiter in an orchTrace.
type tracedProvider struct {
	duroxide.Provider
	t *orchTrace
}

func (p tracedProvider) FetchOrchestrationItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, filter *duroxide.DispatcherCapabilityFilter) (it *duroxide.OrchestrationItem, err error) {
	p.t.call(ctx, "FetchOrchestrationItem", func(ctx context.Context) bool {
		it, err = p.Provider.FetchOrchestrationItem(ctx, lockTimeout, pollTimeout, filter)
		return it == nil
	})
	if it != nil {
		st := stFetch2
		for _, m := range it.Messages {
			if _, ok := m.(*duroxide.StartOrchestration); ok {
				st = stFetch1
			}
		}
		p.t.stage(it.Instance, st, time.Now())
	}
	return it, err
}

func (p tracedProvider) AckOrchestrationItem(ctx context.Context, lockToken string, ack duroxide.OrchestrationAck) (err error) {
	p.t.call(ctx, "AckOrchestrationItem", func(ctx context.Context) bool {
		err = p.Provider.AckOrchestrationItem(ctx, lockToken, ack)
		return false
	})
	if len(ack.HistoryDelta) > 0 {
		inst := ack.HistoryDelta[0].InstanceID
		if ack.Metadata.Status != nil && duroxide.IsTerminalStatus(*ack.Metadata.Status) {
			p.t.stage(inst, stAck2, time.Now())
		} else {
			p.t.stage(inst, stAck1, time.Now())
		}
	}
	return err
}

func (p tracedProvider) FetchWorkItem(ctx context.Context, lockTimeout, pollTimeout time.Duration, session *duroxide.SessionFetchConfig, tags duroxide.TagFilter) (l *duroxide.WorkItemLease, err error) {
	p.t.call(ctx, "FetchWorkItem", func(ctx context.Context) bool {
		l, err = p.Provider.FetchWorkItem(ctx, lockTimeout, pollTimeout, session, tags)
		return l == nil
	})
	if l != nil {
		if ae, ok := l.Item.(*duroxide.ActivityExecute); ok {
			p.t.stage(ae.Instance, stWork, time.Now())
		}
	}
	return l, err
}

func (p tracedProvider) AckWorkItem(ctx context.Context, lockToken string, completion duroxide.WorkItem) (err error) {
	p.t.call(ctx, "AckWorkItem", func(ctx context.Context) bool {
		err = p.Provider.AckWorkItem(ctx, lockToken, completion)
		return false
	})
	if c, ok := completion.(*duroxide.ActivityCompleted); ok {
		p.t.stage(c.Instance, stWorkAck, time.Now())
	}
	return err
}

func (p tracedProvider) EnqueueForOrchestrator(ctx context.Context, item duroxide.WorkItem, delay time.Duration) (err error) {
	p.t.call(ctx, "EnqueueForOrchestrator", func(ctx context.Context) bool {
		err = p.Provider.EnqueueForOrchestrator(ctx, item, delay)
		return false
	})
	if s, ok := item.(*duroxide.StartOrchestration); ok {
		p.t.stage(s.Instance, stStart, time.Now())
	}
	return err
}

// tracedAdmin records the waiter's calls.
type tracedAdmin struct {
	duroxide.ProviderAdmin
	t *orchTrace
}

func (a tracedAdmin) GetInstanceInfo(ctx context.Context, instance string) (info *duroxide.InstanceInfo, err error) {
	a.t.call(ctx, "GetInstanceInfo", func(ctx context.Context) bool {
		info, err = a.ProviderAdmin.GetInstanceInfo(ctx, instance)
		return err != nil || !duroxide.IsTerminalStatus(info.Status)
	})
	if err == nil && duroxide.IsTerminalStatus(info.Status) {
		a.t.stage(instance, stSeen, time.Now())
	}
	return info, err
}
