package agentstoretest

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// kvTests are the KV area's tests of this file.
func kvTests() []test {
	return tests(
		test{"ProviderKVDeltaMergedWhenExecutionEnds", testProviderKVDeltaMergedWhenExecutionEnds},
		test{"ProviderKVEventsAppliedInHistoryOrder", testProviderKVEventsAppliedInHistoryOrder},
		test{"ProviderKVLimitsRefusedBeforeSQL", testProviderKVLimitsRefusedBeforeSQL},
		test{"ProviderKVKeysAndValuesRoundTrip", testProviderKVKeysAndValuesRoundTrip},
		test{"ProviderKVLivesAsLongAsTheInstance", testProviderKVLivesAsLongAsTheInstance},
		test{"ProviderInstanceStats", testProviderInstanceStats},
	)
}

func kvSet(inst string, exec, id uint64, key, value string, ts uint64) duroxide.Event {
	return ev(inst, exec, id, &duroxide.KeyValueSetEvent{Key: key, Value: value, LastUpdatedAtMS: ts})
}

func kvClear(inst string, exec, id uint64, key string) duroxide.Event {
	return ev(inst, exec, id, &duroxide.KeyValueClearedEvent{Key: key})
}

func kvClearAll(inst string, exec, id uint64) duroxide.Event {
	return ev(inst, exec, id, &duroxide.KeyValuesClearedEvent{})
}

// turn enqueues an external event for inst, fetches it and acks a.
// It returns the fetched item (for its KV snapshot).
func (e *pEnv) turn(t *testing.T, inst string, a duroxide.OrchestrationAck) *duroxide.OrchestrationItem {
	t.Helper()
	e.enqueue(t, &duroxide.ExternalRaised{Instance: inst, Name: "go"})
	it := e.fetch(t)
	if it.Instance != inst {
		t.Fatalf("fetched %s, want %s", it.Instance, inst)
	}
	e.ack(t, it, a)
	return it
}

// wantKV checks GetKVAllValues and, per key of want plus absent, GetKVValue.
func (e *pEnv) wantKV(t *testing.T, inst string, want map[string]string, absent ...string) {
	t.Helper()
	all, err := e.p.GetKVAllValues(e.ctx, inst)
	if err != nil || all == nil || !maps.Equal(all, want) {
		t.Fatalf("GetKVAllValues(%s) = %v %v, want %v", inst, all, err, want)
	}
	for k, v := range want {
		got, err := e.p.GetKVValue(e.ctx, inst, k)
		if err != nil || got == nil || *got != v {
			t.Fatalf("GetKVValue(%s, %q) = %v %v, want %q", inst, k, got, err, v)
		}
	}
	for _, k := range absent {
		if got, err := e.p.GetKVValue(e.ctx, inst, k); err != nil || got != nil {
			t.Fatalf("GetKVValue(%s, %q) = %q %v, want nil", inst, k, *got, err)
		}
	}
}

func snapshotValues(it *duroxide.OrchestrationItem) map[string]string {
	out := map[string]string{}
	for k, v := range it.KVSnapshot {
		out[k] = v.Value
	}
	return out
}

// testProviderKVDeltaMergedWhenExecutionEnds: KV writes of the current
// execution are visible to GetKVValue/GetKVAllValues at once but not in
// the fetch snapshot, which holds only what completed executions merged
// (with last_updated_at_ms: the event's, or the ack's clock for 0);
// ContinueAsNew, Completed and Failed each merge the delta (tombstoned keys
// deleted from the store).
func testProviderKVDeltaMergedWhenExecutionEnds(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.enqueue(t, startItem("i1", nil))
	it := e.fetch(t)
	if it.KVSnapshot == nil || len(it.KVSnapshot) != 0 {
		t.Fatalf("new instance snapshot = %#v, want empty non-nil", it.KVSnapshot)
	}
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: []duroxide.Event{startedEv("i1", 1, 1, nil),
		kvSet("i1", 1, 2, "a", "1", 111), kvSet("i1", 1, 3, "b", "2", 112), kvClear("i1", 1, 4, "b"), kvSet("i1", 1, 5, "c", "", 113)},
		Metadata: runningMeta(nil)})
	e.wantKV(t, "i1", map[string]string{"a": "1", "c": ""}, "b", "never")
	// running execution: nothing merged yet; ContinueAsNew merges (with d, set in the same ack)
	it = e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{kvSet("i1", 1, 6, "d", "4", 0),
		ev("i1", 1, 7, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
	if len(it.KVSnapshot) != 0 {
		t.Fatalf("snapshot during execution 1 = %v, want empty", it.KVSnapshot)
	}
	mergedAt := uint64(e.clock.Now().UnixMilli())
	e.wantKV(t, "i1", map[string]string{"a": "1", "c": "", "d": "4"}, "b")
	e.enqueue(t, &duroxide.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "n"})
	it = e.fetch(t)
	want := map[string]duroxide.KvEntry{"a": {Value: "1", LastUpdatedAtMS: 111}, "c": {Value: "", LastUpdatedAtMS: 113}, "d": {Value: "4", LastUpdatedAtMS: mergedAt}}
	if !maps.Equal(it.KVSnapshot, want) {
		t.Fatalf("snapshot after ContinueAsNew = %v, want %v", it.KVSnapshot, want)
	}
	// execution 2 clears everything and sets e: the view changes, the snapshot does not
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: []duroxide.Event{startedEv("i1", 2, 1, nil),
		kvClearAll("i1", 2, 2), kvSet("i1", 2, 3, "e", "5", 0)}, Metadata: runningMeta(nil)})
	e.wantKV(t, "i1", map[string]string{"e": "5"}, "a", "c", "d")
	it = e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 2, 4, &duroxide.OrchestrationCompletedEvent{Output: "ok"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("ok")}})
	if !maps.Equal(it.KVSnapshot, want) {
		t.Fatalf("snapshot during execution 2 = %v, want %v", it.KVSnapshot, want)
	}
	// completed: the store is {e}; the next fetch (a late message) sees it
	e.wantKV(t, "i1", map[string]string{"e": "5"}, "a", "c", "d")
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "late"})
	if it := e.fetch(t); !maps.Equal(snapshotValues(it), map[string]string{"e": "5"}) {
		t.Fatalf("snapshot after completion = %v", it.KVSnapshot)
	}
	// Failed merges too
	e.startInstance(t, "f1", nil)
	e.turn(t, "f1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{kvSet("f1", 1, 2, "x", "y", 0)},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusFailed), Output: sp("boom")}})
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "f1", Name: "late"})
	for {
		it := e.fetch(t)
		if it.Instance == "f1" {
			if !maps.Equal(snapshotValues(it), map[string]string{"x": "y"}) {
				t.Fatalf("snapshot after Failed = %v", it.KVSnapshot)
			}
			break
		}
	}
}

// testProviderKVEventsAppliedInHistoryOrder: the KeyValue* events of one
// ack are applied in history order: a clear-all tombstones every key (of
// the store, of earlier turns and earlier in the ack), later sets win,
// a later clear hides the key again.
func testProviderKVEventsAppliedInHistoryOrder(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	// stored (merged by execution 1) and delta keys
	e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{kvSet("i1", 1, 2, "stored", "s", 0),
		ev("i1", 1, 3, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
	e.enqueue(t, &duroxide.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "n"})
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: []duroxide.Event{startedEv("i1", 2, 1, nil), kvSet("i1", 2, 2, "earlier", "e", 0)},
		Metadata: runningMeta(nil)})
	e.wantKV(t, "i1", map[string]string{"stored": "s", "earlier": "e"})
	e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{
		kvSet("i1", 2, 3, "k", "1", 0), kvSet("i1", 2, 4, "gone", "g", 0), kvClearAll("i1", 2, 5), kvSet("i1", 2, 6, "k", "2", 0),
		kvSet("i1", 2, 7, "m", "x", 0), kvClear("i1", 2, 8, "k"), kvSet("i1", 2, 9, "stored", "again", 0)},
		Metadata: runningMeta(nil)})
	e.wantKV(t, "i1", map[string]string{"m": "x", "stored": "again"}, "k", "gone", "earlier")
	// a clear of a stored key alone, then completion: the store loses it
	e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{kvClear("i1", 2, 10, "stored"),
		ev("i1", 2, 11, &duroxide.OrchestrationCompletedEvent{Output: "ok"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("ok")}})
	e.wantKV(t, "i1", map[string]string{"m": "x"}, "stored", "k")
	if n := e.count(t, models.TableKVDelta); n != 0 {
		t.Fatalf("kv_delta has %d rows after completion, want 0", n)
	}
	if n := e.count(t, models.TableKVStore); n != 1 {
		t.Fatalf("kv_store has %d rows, want 1", n)
	}
}

// testProviderKVLimitsRefusedBeforeSQL: an ack setting more than
// MaxKVKeys keys, a value over MaxKVValueBytes, or a key or value with NUL
// or invalid UTF-8 is refused with a permanent ErrInvalidInput; nothing is
// written and the lock stays usable; exactly the limits are accepted.
func testProviderKVLimitsRefusedBeforeSQL(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "go"})
	it := e.fetch(t)
	many := func(n int) []duroxide.Event {
		out := make([]duroxide.Event, n)
		for i := range out {
			out[i] = kvSet("i1", 1, uint64(2+i), fmt.Sprintf("k%03d", i), "v", 0)
		}
		return out
	}
	big := strings.Repeat("x", duroxide.MaxKVValueBytes)
	for name, delta := range map[string][]duroxide.Event{
		"151 keys":     many(duroxide.MaxKVKeys + 1),
		"64 KiB + 1":   {kvSet("i1", 1, 2, "big", big+"x", 0)},
		"NUL in key":   {kvSet("i1", 1, 2, "a\x00b", "v", 0)},
		"NUL in value": {kvSet("i1", 1, 2, "k", "a\x00b", 0)},
		"bad UTF-8":    {kvClear("i1", 1, 2, "k\xff")},
	} {
		err := e.p.AckOrchestrationItem(e.ctx, it.LockToken, duroxide.OrchestrationAck{ExecutionID: 1, HistoryDelta: delta})
		if wantErr(t, err, agentstore.ErrInvalidInput); err == nil {
			t.Fatalf("%s accepted", name)
		}
	}
	if all, _ := e.p.GetKVAllValues(e.ctx, "i1"); len(all) != 0 {
		t.Fatalf("refused acks wrote %d keys", len(all))
	}
	// exactly at the limits
	delta := append(many(duroxide.MaxKVKeys-1), kvSet("i1", 1, 2+duroxide.MaxKVKeys-1, "big", big, 0))
	e.ack(t, it, duroxide.OrchestrationAck{HistoryDelta: delta})
	all, err := e.p.GetKVAllValues(e.ctx, "i1")
	if err != nil || len(all) != duroxide.MaxKVKeys || all["big"] != big {
		t.Fatalf("at the limits: %d keys, big %d bytes, %v", len(all), len(all["big"]), err)
	}
}

// testProviderKVKeysAndValuesRoundTrip: keys of any UTF-8 (spaces, dots,
// slashes, non-Latin scripts, emoji), empty values and 16 KiB values come
// back byte for byte through GetKVValue, GetKVAllValues and the snapshot.
func testProviderKVKeysAndValuesRoundTrip(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "i1", nil)
	want := map[string]string{
		"with space": "1", "a.b.c": "2", "a/b/c": "3", "ключ": "значение", "鍵": "値", "🔑": "🗝️", "": "empty key",
		"empty": "", "big": strings.Repeat("αβγ-", 16*1024/7), "quote'\"`\\": "%_*?", "x\ny\tz": "line\nbreak",
	}
	var delta []duroxide.Event
	id := uint64(2)
	for k, v := range want {
		delta = append(delta, kvSet("i1", 1, id, k, v, 0))
		id++
	}
	e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: delta})
	e.wantKV(t, "i1", want)
	e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{ev("i1", 1, id, &duroxide.OrchestrationCompletedEvent{Output: "ok"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusCompleted), Output: sp("ok")}})
	e.wantKV(t, "i1", want)
	e.enqueue(t, &duroxide.ExternalRaised{Instance: "i1", Name: "late"})
	if it := e.fetch(t); !maps.Equal(snapshotValues(it), want) {
		t.Fatalf("snapshot = %d keys, want %d", len(it.KVSnapshot), len(want))
	}
}

// testProviderKVLivesAsLongAsTheInstance: pruning executions never deletes
// KV; deleting the instance deletes both tables' rows of it, also for a
// forced delete of a running instance and for its children.
func testProviderKVLivesAsLongAsTheInstance(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	e.startInstance(t, "root", nil)
	e.startInstance(t, "kid", sp("root"))
	e.turn(t, "root", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{kvSet("root", 1, 2, "merged", "m", 0),
		ev("root", 1, 3, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
	e.enqueue(t, &duroxide.ContinueAsNew{Instance: "root", Orchestration: "Orch", Input: "n"})
	it := e.fetch(t)
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: []duroxide.Event{startedEv("root", 2, 1, nil), kvSet("root", 2, 2, "pending", "p", 0)},
		Metadata: runningMeta(nil)})
	e.turn(t, "kid", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{kvSet("kid", 1, 2, "k", "v", 0)}})
	r, err := e.a.PruneExecutions(e.ctx, "root", duroxide.PruneOptions{})
	if err != nil || r.ExecutionsDeleted != 1 {
		t.Fatalf("prune = %+v %v", r, err)
	}
	e.wantKV(t, "root", map[string]string{"merged": "m", "pending": "p"})
	if _, err := e.a.DeleteInstance(e.ctx, "root", true); err != nil {
		t.Fatal(err)
	}
	e.wantKV(t, "root", map[string]string{}, "merged", "pending")
	e.wantKV(t, "kid", map[string]string{}, "k")
	if d, s := e.count(t, models.TableKVDelta), e.count(t, models.TableKVStore); d != 0 || s != 0 {
		t.Fatalf("after delete: %d delta and %d store rows, want none", d, s)
	}
}

// testProviderInstanceStats: GetInstanceStats is nil for an unknown
// instance; otherwise it counts the current execution's events and their
// stored bytes, the distinct keys of the store and of non-tombstone delta
// rows and their value bytes, and the carry-forward events of the current
// execution's OrchestrationStarted.
func testProviderInstanceStats(t *testing.T, h *harness) {
	e := newPEnv(t, h)
	if st, err := e.p.GetInstanceStats(e.ctx, "nope"); err != nil || st != nil {
		t.Fatalf("unknown instance stats = %+v %v, want nil", st, err)
	}
	bytesOf := func(evs ...duroxide.Event) uint64 {
		n := 0
		for _, ev := range evs {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			n += len(b)
		}
		return uint64(n)
	}
	start := startedEv("i1", 1, 1, nil)
	e.startInstance(t, "i1", nil)
	if st, err := e.p.GetInstanceStats(e.ctx, "i1"); err != nil || *st != (duroxide.SystemStats{HistoryEventCount: 1, HistorySizeBytes: bytesOf(start)}) {
		t.Fatalf("stats after start = %+v %v", st, err)
	}
	// stored: a=xx, b=yyy; then delta: a=ééé (6 bytes), c tombstone of a never-stored key, b cleared
	e.turn(t, "i1", duroxide.OrchestrationAck{HistoryDelta: []duroxide.Event{kvSet("i1", 1, 2, "a", "xx", 0), kvSet("i1", 1, 3, "b", "yyy", 0),
		ev("i1", 1, 4, &duroxide.OrchestrationContinuedAsNewEvent{Input: "n"})},
		Metadata: duroxide.ExecutionMetadata{Status: sp(duroxide.StatusContinuedAsNew), Output: sp("n")}})
	cf := [][2]string{{"q", "1"}, {"q", "2"}, {"r", "3"}}
	e.enqueue(t, &duroxide.ContinueAsNew{Instance: "i1", Orchestration: "Orch", Input: "n", CarryForwardEvents: cf})
	it := e.fetch(t)
	start2 := ev("i1", 2, 1, &duroxide.OrchestrationStartedEvent{Name: "Orch", Version: "1.0.0", Input: "n", CarryForwardEvents: cf})
	delta := []duroxide.Event{start2, kvSet("i1", 2, 2, "a", "ééé", 0), kvClear("i1", 2, 3, "c"), kvClear("i1", 2, 4, "b"), kvSet("i1", 2, 5, "d", "z", 0)}
	e.ack(t, it, duroxide.OrchestrationAck{ExecutionID: 2, HistoryDelta: delta, Metadata: runningMeta(nil)})
	st, err := e.p.GetInstanceStats(e.ctx, "i1")
	// keys: store {a, b} ∪ live delta {a, d} = 3; bytes: store 2+3 + delta 6+1 = 12
	want := duroxide.SystemStats{HistoryEventCount: 5, HistorySizeBytes: bytesOf(delta...), QueuePendingCount: 3, KVUserKeyCount: 3, KVTotalValueBytes: 12}
	if err != nil || st == nil || *st != want {
		t.Fatalf("stats = %+v %v, want %+v", st, err, want)
	}
	// plant: a current-execution start event that does not decode
	e.update(t, models.TableHistory, Row{"instance_id": "i1", "execution_id": 2, "event_id": 1}, Row{"event_data": "{not json"})
	_, err = e.p.GetInstanceStats(e.ctx, "i1")
	wantErr(t, err, agentstore.ErrCorruptRow)
}
