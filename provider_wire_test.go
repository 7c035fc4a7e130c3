package agentstore_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/agentstore/agentstore/repo/duroxide"
)

// The wire fields duroxide added after 0.1.29 (parent_execution_id on
// StartOrchestration and OrchestrationStarted; parent_instance, parent_id
// and parent_execution_id on ContinueAsNew) are serde
// default + skip_serializing_if = "Option::is_none": absent values are
// omitted, so the items of a root orchestration encode byte for byte as in
// 0.1.29 (duroxide's continue_as_new_wire_format_unchanged_without_parent_link
// and parent_execution_id_serde_tests).

func ptrU(v uint64) *uint64 { return &v }
func ptrS(v string) *string { return &v }

// TestProviderWireRootShapesUnchanged: a root ContinueAsNew, a top-level
// StartOrchestration and an OrchestrationStarted without parent encode
// exactly as duroxide 0.1.29 wrote them.
func TestProviderWireRootShapesUnchanged(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want string
	}{
		{"ContinueAsNew", &duroxide.ContinueAsNew{Instance: "parent-1::sub::2", Orchestration: "Child", Input: "next-input", Version: ptrS("1.0.0"),
			CarryForwardEvents: [][2]string{{"Evt", "payload"}}},
			`{"ContinueAsNew":{"instance":"parent-1::sub::2","orchestration":"Child","input":"next-input","version":"1.0.0","carry_forward_events":[["Evt","payload"]]}}`},
		{"ContinueAsNew+status", &duroxide.ContinueAsNew{Instance: "i1", Orchestration: "O", Input: "n", InitialCustomStatus: ptrS("s")},
			`{"ContinueAsNew":{"instance":"i1","orchestration":"O","input":"n","version":null,"carry_forward_events":[],"initial_custom_status":"s"}}`},
		{"StartOrchestration", &duroxide.StartOrchestration{Instance: "i1", Orchestration: "O", Input: "{}", Version: ptrS("1.0.0"), ExecutionID: 1},
			`{"StartOrchestration":{"instance":"i1","orchestration":"O","input":"{}","version":"1.0.0","parent_instance":null,"parent_id":null,"execution_id":1}}`},
		{"StartOrchestration+parent", &duroxide.StartOrchestration{Instance: "c", Orchestration: "O", Input: "{}", ParentInstance: ptrS("p"), ParentID: ptrU(4), ExecutionID: 1},
			`{"StartOrchestration":{"instance":"c","orchestration":"O","input":"{}","version":null,"parent_instance":"p","parent_id":4,"execution_id":1}}`},
		{"OrchestrationStarted", duroxide.Event{EventID: 1, InstanceID: "i1", ExecutionID: 1, TimestampMS: 1760000000000, DuroxideVersion: "0.1.29",
			Kind: &duroxide.OrchestrationStartedEvent{Name: "TestOrch", Version: "1.0.0", Input: "{}"}},
			`{"event_id":1,"source_event_id":null,"instance_id":"i1","execution_id":1,"timestamp_ms":1760000000000,"duroxide_version":"0.1.29",` +
				`"type":"OrchestrationStarted","name":"TestOrch","version":"1.0.0","input":"{}","parent_instance":null,"parent_id":null}`},
	} {
		got, err := json.Marshal(c.v)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
		if strings.Contains(string(got), "parent_execution_id") {
			t.Errorf("%s: an absent parent_execution_id is encoded: %s", c.name, got)
		}
	}
}

// TestProviderWireParentLinkFields: the new fields encode in duroxide's
// field order, decode back to the same values, are nil when absent (items
// and events written by 0.1.29) or null, and an absent or null field
// re-encodes as absent.
func TestProviderWireParentLinkFields(t *testing.T) {
	items := []struct {
		v    duroxide.WorkItem
		want string
	}{
		{&duroxide.StartOrchestration{Instance: "parent-1::sub::2", Orchestration: "Child", Input: "child-input", Version: ptrS("1.0.0"),
			ParentInstance: ptrS("parent-1"), ParentID: ptrU(2), ParentExecutionID: ptrU(3), ExecutionID: 1},
			`{"StartOrchestration":{"instance":"parent-1::sub::2","orchestration":"Child","input":"child-input","version":"1.0.0",` +
				`"parent_instance":"parent-1","parent_id":2,"parent_execution_id":3,"execution_id":1}}`},
		{&duroxide.ContinueAsNew{Instance: "parent-1::sub::2", Orchestration: "Child", Input: "next-input", Version: ptrS("1.0.0"),
			ParentInstance: ptrS("parent-1"), ParentID: ptrU(2), ParentExecutionID: ptrU(3), CarryForwardEvents: [][2]string{{"Evt", "payload"}},
			InitialCustomStatus: ptrS("st")},
			`{"ContinueAsNew":{"instance":"parent-1::sub::2","orchestration":"Child","input":"next-input","version":"1.0.0",` +
				`"parent_instance":"parent-1","parent_id":2,"parent_execution_id":3,"carry_forward_events":[["Evt","payload"]],"initial_custom_status":"st"}}`},
		// a partial link (as a runtime may stamp it) keeps exactly what is set
		{&duroxide.ContinueAsNew{Instance: "c", Orchestration: "O", Input: "n", ParentInstance: ptrS("p"), ParentID: ptrU(7), CarryForwardEvents: [][2]string{}},
			`{"ContinueAsNew":{"instance":"c","orchestration":"O","input":"n","version":null,"parent_instance":"p","parent_id":7,"carry_forward_events":[]}}`},
	}
	for _, c := range items {
		got, err := json.Marshal(c.v)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != c.want {
			t.Fatalf("encode:\n got %s\nwant %s", got, c.want)
		}
		back, err := duroxide.UnmarshalWorkItem(got)
		if err != nil {
			t.Fatalf("decode %s: %v", got, err)
		}
		if !reflect.DeepEqual(back, c.v) {
			t.Fatalf("round trip of %s: %#v", got, back)
		}
	}
	ev := duroxide.Event{EventID: 1, InstanceID: "parent-1::sub::2", ExecutionID: 1, TimestampMS: 5, DuroxideVersion: "0.1.31",
		Kind: &duroxide.OrchestrationStartedEvent{Name: "Child", Version: "1.0.0", Input: "child-input", ParentInstance: ptrS("parent-1"),
			ParentID: ptrU(2), ParentExecutionID: ptrU(4), CarryForwardEvents: [][2]string{{"a", "1"}}}}
	const evWant = `{"event_id":1,"source_event_id":null,"instance_id":"parent-1::sub::2","execution_id":1,"timestamp_ms":5,"duroxide_version":"0.1.31",` +
		`"type":"OrchestrationStarted","name":"Child","version":"1.0.0","input":"child-input","parent_instance":"parent-1","parent_id":2,` +
		`"parent_execution_id":4,"carry_forward_events":[["a","1"]]}`
	got, err := json.Marshal(ev)
	if err != nil || string(got) != evWant {
		t.Fatalf("event encode = %s, %v\nwant %s", got, err, evWant)
	}
	var back duroxide.Event
	if err := json.Unmarshal(got, &back); err != nil || !reflect.DeepEqual(back, ev) {
		t.Fatalf("event round trip = %#v, %v", back, err)
	}

	// absent (0.1.29 writers) and null: nil, re-encoded as absent
	for _, lit := range []string{
		`{"StartOrchestration":{"instance":"parent-1::sub::2","orchestration":"Child","input":"child-input","version":"1.0.0","parent_instance":"parent-1","parent_id":2,"execution_id":1}}`,
		`{"StartOrchestration":{"instance":"parent-1::sub::2","orchestration":"Child","input":"child-input","version":"1.0.0","parent_instance":"parent-1","parent_id":2,"parent_execution_id":null,"execution_id":1}}`,
	} {
		w, err := duroxide.UnmarshalWorkItem([]byte(lit))
		if err != nil {
			t.Fatal(err)
		}
		so := w.(*duroxide.StartOrchestration)
		if so.ParentExecutionID != nil || *so.ParentInstance != "parent-1" || *so.ParentID != 2 {
			t.Fatalf("decoded %s as %+v", lit, so)
		}
		if out, _ := json.Marshal(w); strings.Contains(string(out), "parent_execution_id") {
			t.Fatalf("re-encoded %s as %s", lit, out)
		}
	}
	for _, lit := range []string{
		`{"ContinueAsNew":{"instance":"i","orchestration":"O","input":"n","version":"1.0.0","carry_forward_events":[["Evt","payload"]]}}`,
		`{"ContinueAsNew":{"instance":"i","orchestration":"O","input":"n","version":"1.0.0","parent_instance":null,"parent_id":null,"parent_execution_id":null,"carry_forward_events":[["Evt","payload"]]}}`,
	} {
		w, err := duroxide.UnmarshalWorkItem([]byte(lit))
		if err != nil {
			t.Fatal(err)
		}
		c := w.(*duroxide.ContinueAsNew)
		if c.ParentInstance != nil || c.ParentID != nil || c.ParentExecutionID != nil || c.CarryForwardEvents[0] != [2]string{"Evt", "payload"} {
			t.Fatalf("decoded %s as %+v", lit, c)
		}
		out, _ := json.Marshal(w)
		if want := `{"ContinueAsNew":{"instance":"i","orchestration":"O","input":"n","version":"1.0.0","carry_forward_events":[["Evt","payload"]]}}`; string(out) != want {
			t.Fatalf("re-encoded %s as %s", lit, out)
		}
	}
	var old duroxide.Event
	if err := json.Unmarshal([]byte(`{"event_id":1,"source_event_id":null,"instance_id":"c","execution_id":1,"timestamp_ms":1,"duroxide_version":"0.1.29",`+
		`"type":"OrchestrationStarted","name":"Child","version":"1.0.0","input":"child-input","parent_instance":"parent-1","parent_id":2}`), &old); err != nil {
		t.Fatal(err)
	}
	if st := old.Kind.(*duroxide.OrchestrationStartedEvent); st.ParentExecutionID != nil || *st.ParentInstance != "parent-1" || *st.ParentID != 2 {
		t.Fatalf("0.1.29 event decoded as %+v", st)
	}
	// a wrongly typed value is an error, as in serde
	if _, err := duroxide.UnmarshalWorkItem([]byte(`{"ContinueAsNew":{"instance":"i","orchestration":"O","input":"n","version":null,"parent_id":"x"}}`)); err == nil {
		t.Fatal("decoded a string parent_id")
	}
}
