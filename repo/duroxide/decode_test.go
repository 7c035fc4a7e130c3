package duroxide

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// refDecodeStrict is the previous decodeStrict, kept as the reference of
// the decode-once path: parse into a map for the presence checks, then
// decode the whole object again into the struct with encoding/json.
func refDecodeStrict(data []byte, v any, defaulted ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	if m == nil {
		return errors.New("invalid type: null, expected an object")
	}
	rt := reflect.TypeOf(v).Elem()
	for i := range rt.NumField() {
		f := rt.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" || f.Type.Kind() == reflect.Pointer || strings.Contains(opts, "omitempty") || slices.Contains(defaulted, name) {
			continue
		}
		raw, ok := m[name]
		if !ok {
			return errors.New("missing field")
		}
		if string(bytes.TrimSpace(raw)) == "null" {
			return errors.New("null field")
		}
	}
	return json.Unmarshal(data, v)
}

// refEvent is the previous Event.UnmarshalJSON (four passes over data).
func refEvent(data []byte) (Event, error) {
	var c eventCommon
	if err := refDecodeStrict(data, &c, "duroxide_version"); err != nil {
		return Event{}, err
	}
	k := newEventKind(c.Type)
	if k == nil {
		return Event{}, errors.New("unknown variant")
	}
	if err := refDecodeStrict(data, k, "last_updated_at_ms"); err != nil {
		return Event{}, err
	}
	return Event{EventID: c.EventID, SourceEventID: c.SourceEventID, InstanceID: c.InstanceID,
		ExecutionID: c.ExecutionID, TimestampMS: c.TimestampMS, DuroxideVersion: c.DuroxideVersion, Kind: k}, nil
}

// knownNames are the JSON names of every event field (common and kinds).
func knownNames() map[string]bool {
	names := map[string]bool{}
	add := func(t reflect.Type) {
		for _, f := range fieldsOf(t) {
			names[f.name] = true
		}
	}
	add(reflect.TypeOf(eventCommon{}))
	for _, k := range eventTypes {
		add(reflect.TypeOf(newEventKind(k)).Elem())
	}
	return names
}

var eventTypes = []string{"OrchestrationStarted", "OrchestrationCompleted", "OrchestrationFailed", "ActivityScheduled", "ActivityCompleted",
	"ActivityFailed", "ActivityCancelRequested", "TimerCreated", "TimerFired", "ExternalSubscribed", "ExternalEvent", "OrchestrationChained",
	"SubOrchestrationScheduled", "SubOrchestrationCompleted", "SubOrchestrationFailed", "SubOrchestrationCancelRequested",
	"OrchestrationContinuedAsNew", "OrchestrationCancelRequested", "ExternalSubscribedCancelled", "ExternalSubscribedPersistent",
	"ExternalEventPersistent", "ExternalSubscribedPersistentCancelled", "CustomStatusUpdated", "KeyValueSet", "KeyValueCleared", "KeyValuesCleared"}

// caseFolded reports whether a top-level key of data matches a known
// field name only when case is ignored: encoding/json's struct decoding
// (the reference) folds case, serde and the decode-once path do not.
func caseFolded(data []byte, names map[string]bool) bool {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return false
	}
	for k := range m {
		if names[k] {
			continue
		}
		for n := range names {
			if strings.EqualFold(k, n) {
				return true
			}
		}
	}
	return false
}

const head = `{"event_id":3,"source_event_id":2,"instance_id":"i1","execution_id":1,"timestamp_ms":1760000000000,"duroxide_version":"0.1.29",`

var decodeSeeds = []string{
	head + `"type":"OrchestrationStarted","name":"TestOrch","version":"1.0.0","input":"{}","parent_instance":null,"parent_id":null}`,
	head + `"type":"OrchestrationStarted","name":"T","version":"1.0.0","input":"x","parent_instance":"p","parent_id":7,"carry_forward_events":[["a","1"],["b","2"]],"initial_custom_status":"s"}`,
	head + `"type":"OrchestrationFailed","details":{"Application":{"kind":"OrchestrationFailed","message":"boom","retryable":false}}}`,
	head + `"type":"ActivityScheduled","name":"act","input":"in","session_id":"s1","tag":"gpu"}`,
	head + `"type":"ActivityScheduled","name":"a\"ct\u00e9","input":"in\n","session_id":null}`,
	head + `"type":"ActivityScheduled","name":"é ü 日本","input":"\ud800"}`,
	head + `"type":"ActivityScheduled","name":"a","input":1}`,
	head + `"type":"ActivityScheduled","name":"a"}`,
	head + `"type":"ActivityScheduled","name":null,"input":"x"}`,
	head + `"type":"TimerCreated","fire_at_ms":1e3}`,
	head + `"type":"TimerCreated","fire_at_ms":-1}`,
	head + `"type":"TimerCreated","fire_at_ms":18446744073709551616}`,
	head + `"type":"TimerCreated","fire_at_ms": 12 }`,
	head + `"type":"KeyValueSet","key":"k","value":"v"}`,
	head + `"type":"KeyValueSet","key":"k","value":"v","last_updated_at_ms":null}`,
	head + `"type":"CustomStatusUpdated","status":null}`,
	head + `"type":"KeyValuesCleared","extra":{"a":[1,2,{"b":null}]}}`,
	head + `"type":"ActivityFailed","details":{"Poison":{"attempt_count":4294967296,"max_attempts":1,"message_type":{"Activity":{"instance":"i","execution_id":1,"activity_name":"a","activity_id":2}},"message":"m"}}}`,
	head + `"type":"ActivityFailed","details":{"Infrastructure":{"operation":"op","message":"m","retryable":"yes"}}}`,
	`{"event_id":1,"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":1,"type":"OrchestrationCompleted","output":"o"}`,
	`{"event_id":1,"event_id":2,"instance_id":"i","execution_id":1,"timestamp_ms":1,"type":"OrchestrationCompleted","output":"o","output":"p"}`,
	`{"event_id":"1","instance_id":"i","execution_id":1,"timestamp_ms":1,"type":"OrchestrationCompleted","output":"o"}`,
	`{"event_id":1.5,"instance_id":"i","execution_id":1,"timestamp_ms":1,"type":"OrchestrationCompleted","output":"o"}`,
	`{"event_id":true,"instance_id":"i","execution_id":1,"timestamp_ms":1,"type":"OrchestrationCompleted","output":"o"}`,
	``, `{}`, `null`, `[]`, `{"type":"ActivityScheduled"}`, `{"event_id":-1,"type":"OrchestrationCompleted","output":1}`, head + `"type":"Unknown"}`,
}

// TestEventDecodeMatchesReference: on the seeds, the decode-once path
// accepts exactly what the previous decoder accepted, with equal results.
func TestEventDecodeMatchesReference(t *testing.T) {
	names := knownNames()
	for _, s := range decodeSeeds {
		checkAgainstReference(t, []byte(s), names)
	}
}

// FuzzEventDecodeReference is TestEventDecodeMatchesReference on any input:
//
//	go test -run '^$' -fuzz FuzzEventDecodeReference -fuzztime 60s ./repo/duroxide
func FuzzEventDecodeReference(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	names := knownNames()
	f.Fuzz(func(t *testing.T, data []byte) { checkAgainstReference(t, data, names) })
}

func checkAgainstReference(t *testing.T, data []byte, names map[string]bool) {
	t.Helper()
	if caseFolded(data, names) {
		return
	}
	want, werr := refEvent(data)
	var got Event
	gerr := json.Unmarshal(data, &got)
	if (werr == nil) != (gerr == nil) {
		t.Fatalf("%s:\nreference error %v, decode-once error %v", data, werr, gerr)
	}
	if werr == nil && !reflect.DeepEqual(want, got) {
		t.Fatalf("%s:\nreference %+v (%+v)\ndecode-once %+v (%+v)", data, want, want.Kind, got, got.Kind)
	}
}

// BenchmarkEventDecode compares one event's decode on both paths.
func BenchmarkEventDecode(b *testing.B) {
	data := []byte(`{"event_id":1234,"source_event_id":1233,"instance_id":"order-42","execution_id":1,"timestamp_ms":1760000000000,` +
		`"duroxide_version":"0.1.29","type":"ActivityCompleted","result":"{\"ok\":true,\"receipt\":\"r-1233\"}"}`)
	b.Run("reference", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := refEvent(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode-once", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var e Event
			if err := e.UnmarshalJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var validSeeds = []string{``, ` `, `{}`, `[]`, `null`, `nul`, `true`, `tru`, `false`, `0`, `-0`, `01`, `-`, `1.`, `1.5e`, `1.5e+3`, `1E-2`, `.5`,
	`"a"`, `"\u00e9\uD800"`, `"\u12"`, `"\x"`, `"a` + "\x01" + `"`, `"` + "\xff\xfe" + `"`, `{"a":1,}`, `{"a" 1}`, `{,}`, `[1,]`, `[1 2]`,
	`{"a":[1,{"b":null}],"c":"d"}`, `{"a":1}x`, ` {"a":1} `, `{"a":1}}`, `[[[[[]]]]]`, `{"a":-1.25e+10}`, "{\"a\":1}\n",
	strings.Repeat("[", 1001) + strings.Repeat("]", 1001), strings.Repeat("[", 999) + strings.Repeat("]", 999)}
