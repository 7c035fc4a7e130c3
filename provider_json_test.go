package agentstore_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentstore/agentstore/repo/duroxide"
)

const evHead = `{"event_id":3,"source_event_id":2,"instance_id":"i1","execution_id":1,"timestamp_ms":1760000000000,"duroxide_version":"0.1.29",`

// serde JSON of every EventKind, byte for byte as duroxide writes it.
var eventLiterals = map[string]string{
	"OrchestrationStarted":                  `"type":"OrchestrationStarted","name":"TestOrch","version":"1.0.0","input":"{}","parent_instance":null,"parent_id":null}`,
	"OrchestrationStarted+opts":             `"type":"OrchestrationStarted","name":"T","version":"1.0.0","input":"x","parent_instance":"p","parent_id":7,"carry_forward_events":[["a","1"],["b","2"]],"initial_custom_status":"s"}`,
	"OrchestrationCompleted":                `"type":"OrchestrationCompleted","output":"ok"}`,
	"OrchestrationFailed":                   `"type":"OrchestrationFailed","details":{"Application":{"kind":"OrchestrationFailed","message":"boom","retryable":false}}}`,
	"ActivityScheduled":                     `"type":"ActivityScheduled","name":"act","input":"in"}`,
	"ActivityScheduled+opts":                `"type":"ActivityScheduled","name":"act","input":"in","session_id":"s1","tag":"gpu"}`,
	"ActivityCompleted":                     `"type":"ActivityCompleted","result":"r"}`,
	"ActivityFailed":                        `"type":"ActivityFailed","details":{"Infrastructure":{"operation":"op","message":"m","retryable":true}}}`,
	"ActivityFailed+cancelled":              `"type":"ActivityFailed","details":{"Application":{"kind":{"Cancelled":{"reason":"stop"}},"message":"m","retryable":false}}}`,
	"ActivityCancelRequested":               `"type":"ActivityCancelRequested","reason":"r"}`,
	"TimerCreated":                          `"type":"TimerCreated","fire_at_ms":1760000001000}`,
	"TimerFired":                            `"type":"TimerFired","fire_at_ms":1760000001000}`,
	"ExternalSubscribed":                    `"type":"ExternalSubscribed","name":"ev"}`,
	"ExternalEvent":                         `"type":"ExternalEvent","name":"ev","data":"d"}`,
	"OrchestrationChained":                  `"type":"OrchestrationChained","name":"n","instance":"c","input":"i"}`,
	"SubOrchestrationScheduled":             `"type":"SubOrchestrationScheduled","name":"n","instance":"c","input":"i"}`,
	"SubOrchestrationCompleted":             `"type":"SubOrchestrationCompleted","result":"r"}`,
	"SubOrchestrationFailed":                `"type":"SubOrchestrationFailed","details":{"Configuration":{"kind":"Nondeterminism","resource":"act","message":null}}}`,
	"SubOrchestrationCancelRequested":       `"type":"SubOrchestrationCancelRequested","reason":"r"}`,
	"OrchestrationContinuedAsNew":           `"type":"OrchestrationContinuedAsNew","input":"next"}`,
	"OrchestrationCancelRequested":          `"type":"OrchestrationCancelRequested","reason":"r"}`,
	"ExternalSubscribedCancelled":           `"type":"ExternalSubscribedCancelled","reason":"r"}`,
	"ExternalSubscribedPersistent":          `"type":"ExternalSubscribedPersistent","name":"q"}`,
	"ExternalEventPersistent":               `"type":"ExternalEventPersistent","name":"q","data":"d"}`,
	"ExternalSubscribedPersistentCancelled": `"type":"ExternalSubscribedPersistentCancelled","reason":"r"}`,
	"CustomStatusUpdated":                   `"type":"CustomStatusUpdated","status":"working"}`,
	"CustomStatusUpdated+clear":             `"type":"CustomStatusUpdated","status":null}`,
	"KeyValueSet":                           `"type":"KeyValueSet","key":"k","value":"v","last_updated_at_ms":5}`,
	"KeyValueCleared":                       `"type":"KeyValueCleared","key":"k"}`,
	"KeyValuesCleared":                      `"type":"KeyValuesCleared"}`,
	"ActivityFailed+poison":                 `"type":"ActivityFailed","details":{"Poison":{"attempt_count":1,"max_attempts":1,"message_type":{"FailedDeserialization":{"instance":"i1","execution_id":1,"error":"bad"}},"message":"m"}}}`,
	"Poison":                                `"type":"OrchestrationFailed","details":{"Poison":{"attempt_count":11,"max_attempts":10,"message_type":{"Activity":{"instance":"i1","execution_id":1,"activity_name":"a","activity_id":2}},"message":"m"}}}`,
}

func TestProviderEventJSONRoundTrip(t *testing.T) {
	for name, tail := range eventLiterals {
		lit := evHead + tail
		var e duroxide.Event
		if err := json.Unmarshal([]byte(lit), &e); err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		typ := name
		if i := strings.IndexByte(name, '+'); i >= 0 {
			typ = name[:i]
		}
		if name == "Poison" {
			typ = "OrchestrationFailed"
		}
		if e.Kind.EventType() != typ || e.EventID != 3 || e.SourceEventID == nil || *e.SourceEventID != 2 || e.TimestampMS != 1760000000000 {
			t.Fatalf("%s: decoded %+v", name, e)
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		if string(out) != lit {
			t.Fatalf("%s: round trip\n got %s\nwant %s", name, out, lit)
		}
	}
	// typed access
	var e duroxide.Event
	_ = json.Unmarshal([]byte(evHead+eventLiterals["OrchestrationStarted+opts"]), &e)
	st := e.Kind.(*duroxide.OrchestrationStartedEvent)
	if *st.ParentInstance != "p" || *st.ParentID != 7 || st.CarryForwardEvents[1] != [2]string{"b", "2"} || *st.InitialCustomStatus != "s" {
		t.Fatalf("started = %+v", st)
	}
	_ = json.Unmarshal([]byte(evHead+eventLiterals["ActivityFailed+cancelled"]), &e)
	if r := e.Kind.(*duroxide.ActivityFailedEvent).Details.Application.Kind.CancelledReason; r == nil || *r != "stop" {
		t.Fatalf("cancelled reason = %v", r)
	}
}

func TestProviderEventJSONErrors(t *testing.T) {
	var e duroxide.Event
	for _, bad := range []string{
		evHead + `"type":"NoSuchKind"}`,
		`{"garbage":true}`,
		`not json`,
		evHead + `"type":"OrchestrationFailed","details":{"Unknown":{}}}`,
		`{"tYpe":"OrchestrationFailed"}`,                                              // keys are case-sensitive (serde)
		evHead + `"type":"OrchestrationFailed"}`,                                      // missing required field
		evHead + `"type":"ActivityCompleted","result":null}`,                          // null for a non-Option field
		evHead + `"type":"ActivityFailed","details":{"Application":{"message":"m"}}}`, // missing nested field
		evHead + `"type":"ActivityFailed","details":{"Application":{"kind":"Nope","message":"m","retryable":false}}}`,
		evHead + `"type":"ActivityFailed","details":{"Infrastructure":{},"Poison":{}}}`,                          // two variants
		`{"source_event_id":null,"instance_id":"i","execution_id":1,"timestamp_ms":1,"type":"KeyValuesCleared"}`, // no event_id
	} {
		if err := json.Unmarshal([]byte(bad), &e); err == nil {
			t.Fatalf("decoded %q without error", bad)
		}
	}
	// unknown fields are ignored (serde default)
	if err := json.Unmarshal([]byte(evHead+`"type":"ActivityCompleted","result":"r","future_field":1}`), &e); err != nil {
		t.Fatalf("unknown field rejected: %v", err)
	}
	if _, err := json.Marshal(duroxide.Event{EventID: 1}); err == nil {
		t.Fatalf("event without kind encoded")
	}
	if _, err := json.Marshal(duroxide.ErrorDetails{}); err == nil {
		t.Fatalf("empty ErrorDetails encoded")
	}
}

// serde JSON of every WorkItem variant.
var workItemLiterals = []string{
	`{"StartOrchestration":{"instance":"i1","orchestration":"O","input":"{}","version":"1.0.0","parent_instance":null,"parent_id":null,"execution_id":1}}`,
	`{"StartOrchestration":{"instance":"c","orchestration":"O","input":"{}","version":null,"parent_instance":"p","parent_id":4,"execution_id":1}}`,
	`{"ActivityExecute":{"instance":"i1","execution_id":1,"id":2,"name":"act","input":"in"}}`,
	`{"ActivityExecute":{"instance":"i1","execution_id":1,"id":2,"name":"act","input":"in","session_id":"s","tag":"gpu"}}`,
	`{"ActivityCompleted":{"instance":"i1","execution_id":1,"id":2,"result":"r"}}`,
	`{"ActivityFailed":{"instance":"i1","execution_id":1,"id":2,"details":{"Application":{"kind":"ActivityFailed","message":"m","retryable":false}}}}`,
	`{"TimerFired":{"instance":"i1","execution_id":1,"id":3,"fire_at_ms":1760000001000}}`,
	`{"ExternalRaised":{"instance":"i1","name":"ev","data":"d"}}`,
	`{"SubOrchCompleted":{"parent_instance":"p","parent_execution_id":1,"parent_id":4,"result":"r"}}`,
	`{"SubOrchFailed":{"parent_instance":"p","parent_execution_id":1,"parent_id":4,"details":{"Poison":{"attempt_count":3,"max_attempts":2,"message_type":{"Orchestration":{"instance":"c","execution_id":1}},"message":"m"}}}}`,
	`{"CancelInstance":{"instance":"i1","reason":"bye"}}`,
	`{"ContinueAsNew":{"instance":"i1","orchestration":"O","input":"n","version":"1.0.0","carry_forward_events":[["a","1"]],"initial_custom_status":"s"}}`,
	`{"ContinueAsNew":{"instance":"i1","orchestration":"O","input":"n","version":null,"carry_forward_events":[]}}`,
	`{"QueueMessage":{"instance":"i1","name":"q","data":"d"}}`,
}

func TestProviderWorkItemJSONRoundTrip(t *testing.T) {
	for _, lit := range workItemLiterals {
		w, err := duroxide.UnmarshalWorkItem([]byte(lit))
		if err != nil {
			t.Fatalf("decode %s: %v", lit, err)
		}
		if !strings.HasPrefix(lit, `{"`+w.WorkItemType()+`":`) {
			t.Fatalf("variant %s for %s", w.WorkItemType(), lit)
		}
		out, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != lit {
			t.Fatalf("round trip\n got %s\nwant %s", out, lit)
		}
	}
	// routing: sub-orchestration completions go to the parent
	w, _ := duroxide.UnmarshalWorkItem([]byte(workItemLiterals[8]))
	if w.RoutingInstance() != "p" {
		t.Fatalf("routing = %s", w.RoutingInstance())
	}
	// carry_forward_events defaults to [] when absent
	w, err := duroxide.UnmarshalWorkItem([]byte(`{"ContinueAsNew":{"instance":"i1","orchestration":"O","input":"n","version":null}}`))
	if err != nil || w.(*duroxide.ContinueAsNew).CarryForwardEvents == nil {
		t.Fatalf("default carry_forward_events: %v %v", w, err)
	}
	for _, bad := range []string{`{"ExternalRaised2":{}}`, `{}`, `{"A":{},"B":{}}`, `[]`, `{"ActivityCompleted":5}`,
		`{"ActivityFailed":{}}`, `{"ActivityExecute":null}`, `{"QueueMessage":{"instance":"i","name":"n"}}`} {
		if _, err := duroxide.UnmarshalWorkItem([]byte(bad)); err == nil {
			t.Fatalf("decoded %s", bad)
		}
	}
}
