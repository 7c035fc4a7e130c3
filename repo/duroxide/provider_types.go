package duroxide

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/Masterminds/semver/v3"
)

// Execution status values stored in executions.status.
const (
	StatusRunning        = "Running"
	StatusCompleted      = "Completed"
	StatusFailed         = "Failed"
	StatusContinuedAsNew = "ContinuedAsNew"
)

// IsTerminalStatus reports whether status ends an execution (Completed,
// Failed or ContinuedAsNew).
func IsTerminalStatus(status string) bool {
	return status == StatusCompleted || status == StatusFailed || status == StatusContinuedAsNew
}

// ---------------------------------------------------------------------------
// Event

// Event is one history event. Its JSON is one flat object: the common fields
// below plus the fields of Kind, with the kind named by "type" (duroxide's
// flat layout, the kind's tag among the fields), for example
//
//	{"event_id":1,"source_event_id":null,"instance_id":"i1","execution_id":1,
//	 "timestamp_ms":1760000000000,"duroxide_version":"0.1.29",
//	 "type":"OrchestrationStarted","name":"TestOrch","version":"1.0.0","input":"{}",
//	 "parent_instance":null,"parent_id":null}
//
// Unknown fields are ignored; an unknown "type" is an error.
type Event struct {
	EventID         uint64    // assigned by the runtime, > 0
	SourceEventID   *uint64   // the scheduling event a completion refers to
	InstanceID      string    // owning instance
	ExecutionID     uint64    // owning execution
	TimestampMS     uint64    // creation time, epoch ms
	DuroxideVersion string    // runtime version that wrote the event
	Kind            EventKind // what happened; never nil in a valid event
}

// EventKind is the kind-specific part of an Event. The concrete types are
// the *...Event structs of this package.
type EventKind interface {
	// EventType returns the JSON "type" tag of the kind.
	EventType() string
}

// OrchestrationStartedEvent starts an execution.
type OrchestrationStartedEvent struct {
	Name           string  `json:"name"`
	Version        string  `json:"version"`
	Input          string  `json:"input"`
	ParentInstance *string `json:"parent_instance"`
	ParentID       *uint64 `json:"parent_id"`
	// ParentExecutionID is the execution of the parent that scheduled this
	// sub-orchestration (duroxide after 0.1.29). Nil for top-level
	// instances and for events of older runtimes, and then omitted from
	// the JSON, so such an event encodes exactly as in duroxide 0.1.29.
	ParentExecutionID   *uint64     `json:"parent_execution_id,omitempty"`
	CarryForwardEvents  [][2]string `json:"carry_forward_events,omitempty"`
	InitialCustomStatus *string     `json:"initial_custom_status,omitempty"`
}

// OrchestrationCompletedEvent ends an execution successfully.
type OrchestrationCompletedEvent struct {
	Output string `json:"output"`
}

// OrchestrationFailedEvent ends an execution with an error.
type OrchestrationFailedEvent struct {
	Details ErrorDetails `json:"details"`
}

// ActivityScheduledEvent schedules an activity.
type ActivityScheduledEvent struct {
	Name      string  `json:"name"`
	Input     string  `json:"input"`
	SessionID *string `json:"session_id,omitempty"`
	Tag       *string `json:"tag,omitempty"`
}

// ActivityCompletedEvent records an activity result.
type ActivityCompletedEvent struct {
	Result string `json:"result"`
}

// ActivityFailedEvent records an activity failure.
type ActivityFailedEvent struct {
	Details ErrorDetails `json:"details"`
}

// ActivityCancelRequestedEvent records a cancellation request for an activity.
type ActivityCancelRequestedEvent struct {
	Reason string `json:"reason"`
}

// TimerCreatedEvent creates a timer firing at FireAtMS.
type TimerCreatedEvent struct {
	FireAtMS uint64 `json:"fire_at_ms"`
}

// TimerFiredEvent records a fired timer.
type TimerFiredEvent struct {
	FireAtMS uint64 `json:"fire_at_ms"`
}

// ExternalSubscribedEvent subscribes to an external event.
type ExternalSubscribedEvent struct {
	Name string `json:"name"`
}

// ExternalEventEvent records a delivered external event.
type ExternalEventEvent struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// OrchestrationChainedEvent starts a detached orchestration.
type OrchestrationChainedEvent struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Input    string `json:"input"`
}

// SubOrchestrationScheduledEvent schedules a sub-orchestration.
type SubOrchestrationScheduledEvent struct {
	Name     string `json:"name"`
	Instance string `json:"instance"`
	Input    string `json:"input"`
}

// SubOrchestrationCompletedEvent records a sub-orchestration result.
type SubOrchestrationCompletedEvent struct {
	Result string `json:"result"`
}

// SubOrchestrationFailedEvent records a sub-orchestration failure.
type SubOrchestrationFailedEvent struct {
	Details ErrorDetails `json:"details"`
}

// SubOrchestrationCancelRequestedEvent records a cancellation request for a sub-orchestration.
type SubOrchestrationCancelRequestedEvent struct {
	Reason string `json:"reason"`
}

// OrchestrationContinuedAsNewEvent ends an execution that continues as a new one.
type OrchestrationContinuedAsNewEvent struct {
	Input string `json:"input"`
}

// OrchestrationCancelRequestedEvent records a cancellation request for the orchestration.
type OrchestrationCancelRequestedEvent struct {
	Reason string `json:"reason"`
}

// ExternalSubscribedCancelledEvent cancels an external subscription.
type ExternalSubscribedCancelledEvent struct {
	Reason string `json:"reason"`
}

// QueueSubscribedEvent subscribes to a persistent queue (JSON type "ExternalSubscribedPersistent").
type QueueSubscribedEvent struct {
	Name string `json:"name"`
}

// QueueEventDeliveredEvent delivers a persistent queue message (JSON type "ExternalEventPersistent").
type QueueEventDeliveredEvent struct {
	Name string `json:"name"`
	Data string `json:"data"`
}

// QueueSubscriptionCancelledEvent cancels a queue subscription (JSON type
// "ExternalSubscribedPersistentCancelled").
type QueueSubscriptionCancelledEvent struct {
	Reason string `json:"reason"`
}

// CustomStatusUpdatedEvent sets (Status non-nil) or clears (nil) the custom status.
type CustomStatusUpdatedEvent struct {
	Status *string `json:"status"`
}

// KeyValueSetEvent sets a key of the instance's key-value store.
type KeyValueSetEvent struct {
	Key             string `json:"key"`
	Value           string `json:"value"`
	LastUpdatedAtMS uint64 `json:"last_updated_at_ms"`
}

// KeyValueClearedEvent clears one key.
type KeyValueClearedEvent struct {
	Key string `json:"key"`
}

// KeyValuesClearedEvent clears every key.
type KeyValuesClearedEvent struct{}

// EventType implements EventKind.
func (*OrchestrationStartedEvent) EventType() string { return "OrchestrationStarted" }

// EventType implements EventKind.
func (*OrchestrationCompletedEvent) EventType() string { return "OrchestrationCompleted" }

// EventType implements EventKind.
func (*OrchestrationFailedEvent) EventType() string { return "OrchestrationFailed" }

// EventType implements EventKind.
func (*ActivityScheduledEvent) EventType() string { return "ActivityScheduled" }

// EventType implements EventKind.
func (*ActivityCompletedEvent) EventType() string { return "ActivityCompleted" }

// EventType implements EventKind.
func (*ActivityFailedEvent) EventType() string { return "ActivityFailed" }

// EventType implements EventKind.
func (*ActivityCancelRequestedEvent) EventType() string { return "ActivityCancelRequested" }

// EventType implements EventKind.
func (*TimerCreatedEvent) EventType() string { return "TimerCreated" }

// EventType implements EventKind.
func (*TimerFiredEvent) EventType() string { return "TimerFired" }

// EventType implements EventKind.
func (*ExternalSubscribedEvent) EventType() string { return "ExternalSubscribed" }

// EventType implements EventKind.
func (*ExternalEventEvent) EventType() string { return "ExternalEvent" }

// EventType implements EventKind.
func (*OrchestrationChainedEvent) EventType() string { return "OrchestrationChained" }

// EventType implements EventKind.
func (*SubOrchestrationScheduledEvent) EventType() string { return "SubOrchestrationScheduled" }

// EventType implements EventKind.
func (*SubOrchestrationCompletedEvent) EventType() string { return "SubOrchestrationCompleted" }

// EventType implements EventKind.
func (*SubOrchestrationFailedEvent) EventType() string { return "SubOrchestrationFailed" }

// EventType implements EventKind.
func (*SubOrchestrationCancelRequestedEvent) EventType() string {
	return "SubOrchestrationCancelRequested"
}

// EventType implements EventKind.
func (*OrchestrationContinuedAsNewEvent) EventType() string { return "OrchestrationContinuedAsNew" }

// EventType implements EventKind.
func (*OrchestrationCancelRequestedEvent) EventType() string { return "OrchestrationCancelRequested" }

// EventType implements EventKind.
func (*ExternalSubscribedCancelledEvent) EventType() string { return "ExternalSubscribedCancelled" }

// EventType implements EventKind.
func (*QueueSubscribedEvent) EventType() string { return "ExternalSubscribedPersistent" }

// EventType implements EventKind.
func (*QueueEventDeliveredEvent) EventType() string { return "ExternalEventPersistent" }

// EventType implements EventKind.
func (*QueueSubscriptionCancelledEvent) EventType() string {
	return "ExternalSubscribedPersistentCancelled"
}

// EventType implements EventKind.
func (*CustomStatusUpdatedEvent) EventType() string { return "CustomStatusUpdated" }

// EventType implements EventKind.
func (*KeyValueSetEvent) EventType() string { return "KeyValueSet" }

// EventType implements EventKind.
func (*KeyValueClearedEvent) EventType() string { return "KeyValueCleared" }

// EventType implements EventKind.
func (*KeyValuesClearedEvent) EventType() string { return "KeyValuesCleared" }

// newEventKind returns a zero kind for a JSON type tag, or nil if unknown.
func newEventKind(t string) EventKind {
	switch t {
	case "OrchestrationStarted":
		return &OrchestrationStartedEvent{}
	case "OrchestrationCompleted":
		return &OrchestrationCompletedEvent{}
	case "OrchestrationFailed":
		return &OrchestrationFailedEvent{}
	case "ActivityScheduled":
		return &ActivityScheduledEvent{}
	case "ActivityCompleted":
		return &ActivityCompletedEvent{}
	case "ActivityFailed":
		return &ActivityFailedEvent{}
	case "ActivityCancelRequested":
		return &ActivityCancelRequestedEvent{}
	case "TimerCreated":
		return &TimerCreatedEvent{}
	case "TimerFired":
		return &TimerFiredEvent{}
	case "ExternalSubscribed":
		return &ExternalSubscribedEvent{}
	case "ExternalEvent":
		return &ExternalEventEvent{}
	case "OrchestrationChained":
		return &OrchestrationChainedEvent{}
	case "SubOrchestrationScheduled":
		return &SubOrchestrationScheduledEvent{}
	case "SubOrchestrationCompleted":
		return &SubOrchestrationCompletedEvent{}
	case "SubOrchestrationFailed":
		return &SubOrchestrationFailedEvent{}
	case "SubOrchestrationCancelRequested":
		return &SubOrchestrationCancelRequestedEvent{}
	case "OrchestrationContinuedAsNew":
		return &OrchestrationContinuedAsNewEvent{}
	case "OrchestrationCancelRequested":
		return &OrchestrationCancelRequestedEvent{}
	case "ExternalSubscribedCancelled":
		return &ExternalSubscribedCancelledEvent{}
	case "ExternalSubscribedPersistent":
		return &QueueSubscribedEvent{}
	case "ExternalEventPersistent":
		return &QueueEventDeliveredEvent{}
	case "ExternalSubscribedPersistentCancelled":
		return &QueueSubscriptionCancelledEvent{}
	case "CustomStatusUpdated":
		return &CustomStatusUpdatedEvent{}
	case "KeyValueSet":
		return &KeyValueSetEvent{}
	case "KeyValueCleared":
		return &KeyValueClearedEvent{}
	case "KeyValuesCleared":
		return &KeyValuesClearedEvent{}
	}
	return nil
}

type eventCommon struct {
	EventID         uint64  `json:"event_id"`
	SourceEventID   *uint64 `json:"source_event_id"`
	InstanceID      string  `json:"instance_id"`
	ExecutionID     uint64  `json:"execution_id"`
	TimestampMS     uint64  `json:"timestamp_ms"`
	DuroxideVersion string  `json:"duroxide_version"`
	Type            string  `json:"type"`
}

// MarshalJSON writes duroxide's flat, "type"-tagged layout.
func (e Event) MarshalJSON() ([]byte, error) {
	if e.Kind == nil {
		return nil, errors.New("event: nil kind")
	}
	head, err := json.Marshal(eventCommon{e.EventID, e.SourceEventID, e.InstanceID, e.ExecutionID,
		e.TimestampMS, e.DuroxideVersion, e.Kind.EventType()})
	if err != nil {
		return nil, err
	}
	body, err := json.Marshal(e.Kind)
	if err != nil {
		return nil, err
	}
	body = bytes.TrimSpace(body)
	if len(body) < 2 || body[0] != '{' {
		return nil, fmt.Errorf("event kind %s does not encode as an object", e.Kind.EventType())
	}
	if len(body) == 2 { // "{}"
		return head, nil
	}
	out := make([]byte, 0, len(head)+len(body))
	out = append(out, head[:len(head)-1]...)
	out = append(out, ',')
	return append(out, body[1:]...), nil
}

// UnmarshalJSON reads duroxide's flat layout with duroxide's own decoding
// rules: the "type" key must be spelled exactly and name a known kind,
// required fields (those that are not pointers) must be present and not
// null; unknown fields are ignored, and so are keys that match a field
// only when case is ignored (duroxide matches names exactly).
// duroxide_version defaults to "" when absent.
//
// The object is parsed once (into its top-level keys); the common fields
// and the kind's fields are then decoded from their own values, so the
// cost is one pass over the event's JSON, not one per struct.
func (e *Event) UnmarshalJSON(data []byte) error {
	m, err := objectFields(data)
	if err != nil {
		return fmt.Errorf("event: %w", err)
	}
	var c eventCommon
	if err := decodeFields(m, &c, "duroxide_version"); err != nil {
		return fmt.Errorf("event: %w", err)
	}
	k := newEventKind(c.Type)
	if k == nil {
		return fmt.Errorf("event: unknown variant %q", c.Type)
	}
	if err := decodeFields(m, k, "last_updated_at_ms"); err != nil {
		return fmt.Errorf("event %s: %w", c.Type, err)
	}
	*e = Event{EventID: c.EventID, SourceEventID: c.SourceEventID, InstanceID: c.InstanceID,
		ExecutionID: c.ExecutionID, TimestampMS: c.TimestampMS, DuroxideVersion: c.DuroxideVersion, Kind: k}
	return nil
}

// decodeStrict decodes the JSON object data into v (a pointer to a struct
// without its own UnmarshalJSON) with duroxide's rules for required fields:
// every field that is not a pointer (an optional value), not omitempty and not listed
// in defaulted must be present under its exact name and not be null.
// Keys are matched exactly (see decodeFields).
func decodeStrict(data []byte, v any, defaulted ...string) error {
	m, err := objectFields(data)
	if err != nil {
		return err
	}
	return decodeFields(m, v, defaulted...)
}

// rawField is one top-level member of a JSON object: its key and its raw
// value, both slices of the object's text (a key with escapes is decoded
// into its own bytes).
type rawField struct {
	key []byte
	val []byte
}

// objectFields splits the JSON object data into its top-level members
// without decoding their values: one validity pass (json.Valid) and one
// pass that steps over each value. null is refused, as duroxide refuses it
// for a struct; any other non-object, or invalid JSON, gets encoding/json's
// own error.
func objectFields(data []byte) ([]rawField, error) {
	if !json.Valid(data) {
		return nil, objectError(data)
	}
	i := skipSpace(data, 0)
	if data[i] == 'n' {
		return nil, errors.New("invalid type: null, expected an object")
	}
	if data[i] != '{' {
		return nil, objectError(data)
	}
	out := make([]rawField, 0, 12)
	i = skipSpace(data, i+1)
	if data[i] == '}' {
		return out, nil
	}
	for {
		end := skipString(data, i)
		key := data[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 || !utf8.Valid(key) {
			var k string
			if err := json.Unmarshal(data[i:end], &k); err != nil {
				return nil, err
			}
			key = []byte(k)
		}
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // the ':'
		end = skipValue(data, i)
		out = append(out, rawField{key: key, val: data[i:end]})
		i = skipSpace(data, end)
		if data[i] == '}' {
			return out, nil
		}
		i = skipSpace(data, i+1) // the ','
	}
}

// objectError returns encoding/json's error for data that is not a JSON
// object (or not JSON).
func objectError(data []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return err
	}
	return errors.New("invalid type: expected an object")
}

// lookup returns the raw value of key in fs: the last one if the key
// repeats, as encoding/json does.
func lookup(fs []rawField, key string) ([]byte, bool) {
	for i := len(fs) - 1; i >= 0; i-- {
		if string(fs[i].key) == key {
			return fs[i].val, true
		}
	}
	return nil, false
}

// The scanners below step over valid JSON (objectFields checked it).

func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index after the string literal starting at i.
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the value starting at i.
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for i < len(data) {
			switch data[i] {
			case '"':
				i = skipString(data, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	for i < len(data) {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
		i++
	}
	return i
}

// jsonField is one field of a struct decoded by decodeFields.
type jsonField struct {
	name     string       // JSON key, matched exactly
	index    int          // struct field index
	optional bool         // pointer or omitempty: may be absent or null
	kind     reflect.Kind // of the field, or of its element for a pointer
	pointer  bool
}

// fieldsOf returns the JSON fields of the struct type t: exported fields
// with a json name tag (every struct decodeFields is given has one per
// field; a field without one is not decoded, and fields tagged "-" are
// skipped).
func fieldsOf(t reflect.Type) []jsonField {
	// Computed per call (no package-level cache): a few tag lookups next
	// to the JSON scan of the value.
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		jf := jsonField{name: name, index: i, kind: f.Type.Kind(),
			optional: f.Type.Kind() == reflect.Pointer || strings.Contains(opts, "omitempty")}
		if f.Type.Kind() == reflect.Pointer {
			jf.pointer, jf.kind = true, f.Type.Elem().Kind()
		}
		out = append(out, jf)
	}
	return out
}

// decodeFields sets the fields of the struct v points to from the parsed
// object m, with decodeStrict's rules: first every required field (not
// optional, not listed in defaulted) must be present and not null, then
// each present field is decoded from its own value. Strings without
// escapes, unsigned integers and booleans are decoded directly; other
// values (nested objects, arrays, escaped strings) with encoding/json.
func decodeFields(m []rawField, v any, defaulted ...string) error {
	rv := reflect.ValueOf(v).Elem()
	fields := fieldsOf(rv.Type())
	for _, f := range fields {
		if f.optional || slices.Contains(defaulted, f.name) {
			continue
		}
		raw, ok := lookup(m, f.name)
		if !ok {
			return fmt.Errorf("missing field `%s`", f.name)
		}
		if isNull(raw) {
			return fmt.Errorf("invalid type: null for field `%s`", f.name)
		}
	}
	for _, f := range fields {
		raw, ok := lookup(m, f.name)
		if !ok {
			continue
		}
		fv := rv.Field(f.index)
		if f.pointer {
			if isNull(raw) {
				fv.SetZero()
				continue
			}
			if fv.IsNil() {
				fv.Set(reflect.New(fv.Type().Elem()))
			}
			fv = fv.Elem()
		}
		if err := decodeValue(raw, fv, f.kind); err != nil {
			return fmt.Errorf("field `%s`: %w", f.name, err)
		}
	}
	return nil
}

// isNull reports whether the raw JSON value is null.
func isNull(raw []byte) bool { return string(bytes.TrimSpace(raw)) == "null" }

// decodeValue decodes one raw JSON value (valid JSON: objectFields
// checked it) into fv, exactly as encoding/json would.
func decodeValue(raw []byte, fv reflect.Value, kind reflect.Kind) error {
	raw = bytes.TrimSpace(raw)
	switch kind {
	case reflect.String:
		if s, ok := plainString(raw); ok {
			fv.SetString(s)
			return nil
		}
	case reflect.Uint64, reflect.Uint32, reflect.Uint16, reflect.Uint8, reflect.Uint:
		if len(raw) > 0 && raw[0] >= '0' && raw[0] <= '9' {
			if n, err := strconv.ParseUint(string(raw), 10, fv.Type().Bits()); err == nil {
				fv.SetUint(n)
				return nil
			}
		}
	case reflect.Bool:
		switch string(raw) {
		case "true":
			fv.SetBool(true)
			return nil
		case "false":
			fv.SetBool(false)
			return nil
		}
	}
	if isNull(raw) { // encoding/json: null leaves a non-pointer unchanged
		return nil
	}
	return json.Unmarshal(raw, fv.Addr().Interface())
}

// plainString returns the text of a JSON string literal that needs no
// general decoding: valid UTF-8 whose escapes, if any, are the one-letter
// ones (\" \\ \/ \b \f \n \r \t). Invalid UTF-8 (encoding/json replaces
// it with U+FFFD) and \u escapes (surrogate rules) take the general path.
func plainString(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	ascii, escaped := true, false
	for _, c := range body {
		if c == '\\' {
			escaped = true
		}
		if c >= 0x80 {
			ascii = false
		}
	}
	if !ascii && !utf8.Valid(body) {
		return "", false
	}
	if !escaped {
		return string(body), true
	}
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		switch body[i] {
		case '"', '\\', '/':
			out = append(out, body[i])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default: // \u
			return "", false
		}
	}
	return string(out), true
}

// decodeVariant reads a one-key object whose key names the kind of its
// value: exactly one key, which must be one of names. It returns the key and its value.
func decodeVariant(data []byte, what string, names ...string) (string, json.RawMessage, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return "", nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(m) != 1 {
		return "", nil, fmt.Errorf("%s: want exactly one variant key, got %d", what, len(m))
	}
	for k, v := range m {
		if !slices.Contains(names, k) {
			return "", nil, fmt.Errorf("%s: unknown variant %q", what, k)
		}
		return k, v, nil
	}
	return "", nil, errors.New(what + ": empty")
}

// ---------------------------------------------------------------------------
// ErrorDetails

// ErrorDetails is the externally tagged error of failed activities and
// orchestrations: exactly one field is set, and it encodes as
// {"Infrastructure":{...}}, {"Configuration":{...}}, {"Application":{...}}
// or {"Poison":{...}}.
type ErrorDetails struct {
	Infrastructure *InfrastructureError `json:"Infrastructure,omitempty"`
	Configuration  *ConfigurationError  `json:"Configuration,omitempty"`
	Application    *ApplicationError    `json:"Application,omitempty"`
	Poison         *PoisonError         `json:"Poison,omitempty"`
}

// InfrastructureError is a provider or infrastructure failure.
type InfrastructureError struct {
	Operation string `json:"operation"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// ConfigurationError is a configuration problem such as nondeterminism.
// Kind is the kind's name (a JSON string), e.g. "Nondeterminism".
type ConfigurationError struct {
	Kind     string  `json:"kind"`
	Resource string  `json:"resource"`
	Message  *string `json:"message"`
}

// ApplicationError is an error raised by user code.
type ApplicationError struct {
	Kind      AppErrorKind `json:"kind"`
	Message   string       `json:"message"`
	Retryable bool         `json:"retryable"`
}

// AppErrorKind is "ActivityFailed", "OrchestrationFailed", "Panicked" (Name
// set) or {"Cancelled":{"reason":...}} (CancelledReason set).
type AppErrorKind struct {
	Name            string  // the kind's name (a JSON string); empty when CancelledReason is set
	CancelledReason *string // set for the Cancelled variant
}

// MarshalJSON implements json.Marshaler.
func (k AppErrorKind) MarshalJSON() ([]byte, error) {
	if k.CancelledReason != nil {
		return json.Marshal(map[string]map[string]string{"Cancelled": {"reason": *k.CancelledReason}})
	}
	if !slices.Contains(appErrorKindNames(), k.Name) {
		return nil, fmt.Errorf("application error kind: unknown variant %q", k.Name)
	}
	return json.Marshal(k.Name)
}

// appErrorKindNames are the unit variants of AppErrorKind.
func appErrorKindNames() []string {
	return []string{"ActivityFailed", "OrchestrationFailed", "Panicked"}
}

// UnmarshalJSON implements json.Unmarshaler.
func (k *AppErrorKind) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '"' {
		var name string
		if err := json.Unmarshal(data, &name); err != nil {
			return err
		}
		if !slices.Contains(appErrorKindNames(), name) {
			return fmt.Errorf("application error kind: unknown variant %q", name)
		}
		*k = AppErrorKind{Name: name}
		return nil
	}
	_, body, err := decodeVariant(data, "application error kind", "Cancelled")
	if err != nil {
		return err
	}
	var c struct {
		Reason string `json:"reason"`
	}
	if err := decodeStrict(body, &c); err != nil {
		return fmt.Errorf("application error kind Cancelled: %w", err)
	}
	*k = AppErrorKind{CancelledReason: &c.Reason}
	return nil
}

// PoisonError reports a message that exceeded its attempts.
type PoisonError struct {
	AttemptCount uint32            `json:"attempt_count"`
	MaxAttempts  uint32            `json:"max_attempts"`
	MessageType  PoisonMessageType `json:"message_type"`
	Message      string            `json:"message"`
}

// PoisonMessageType names the poisoned message; exactly one field is set.
type PoisonMessageType struct {
	Orchestration         *PoisonOrchestration         `json:"Orchestration,omitempty"`
	Activity              *PoisonActivity              `json:"Activity,omitempty"`
	FailedDeserialization *PoisonFailedDeserialization `json:"FailedDeserialization,omitempty"`
}

// MarshalJSON checks that exactly one variant is set.
func (t PoisonMessageType) MarshalJSON() ([]byte, error) {
	n := 0
	for _, set := range []bool{t.Orchestration != nil, t.Activity != nil, t.FailedDeserialization != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("poison message type: %d variants set, want exactly 1", n)
	}
	type plain PoisonMessageType
	return json.Marshal(plain(t))
}

// UnmarshalJSON reads exactly one known variant with its required fields.
func (t *PoisonMessageType) UnmarshalJSON(data []byte) error {
	tag, body, err := decodeVariant(data, "poison message type", "Orchestration", "Activity", "FailedDeserialization")
	if err != nil {
		return err
	}
	var out PoisonMessageType
	switch tag {
	case "Orchestration":
		out.Orchestration = &PoisonOrchestration{}
		err = decodeStrict(body, out.Orchestration)
	case "Activity":
		out.Activity = &PoisonActivity{}
		err = decodeStrict(body, out.Activity)
	case "FailedDeserialization":
		out.FailedDeserialization = &PoisonFailedDeserialization{}
		err = decodeStrict(body, out.FailedDeserialization)
	}
	if err != nil {
		return fmt.Errorf("poison message type %s: %w", tag, err)
	}
	*t = out
	return nil
}

// PoisonOrchestration names a poisoned orchestration turn.
type PoisonOrchestration struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
}

// PoisonActivity names a poisoned activity.
type PoisonActivity struct {
	Instance     string `json:"instance"`
	ExecutionID  uint64 `json:"execution_id"`
	ActivityName string `json:"activity_name"`
	ActivityID   uint64 `json:"activity_id"`
}

// PoisonFailedDeserialization names a message that could not be decoded.
type PoisonFailedDeserialization struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	Error       string `json:"error"`
}

// MarshalJSON checks that exactly one variant is set.
func (d ErrorDetails) MarshalJSON() ([]byte, error) {
	n := 0
	for _, set := range []bool{d.Infrastructure != nil, d.Configuration != nil, d.Application != nil, d.Poison != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, fmt.Errorf("error details: %d variants set, want exactly 1", n)
	}
	type plain ErrorDetails
	return json.Marshal(plain(d))
}

// UnmarshalJSON reads exactly one known variant with its required fields.
func (d *ErrorDetails) UnmarshalJSON(data []byte) error {
	tag, body, err := decodeVariant(data, "error details", "Infrastructure", "Configuration", "Application", "Poison")
	if err != nil {
		return err
	}
	var out ErrorDetails
	switch tag {
	case "Infrastructure":
		out.Infrastructure = &InfrastructureError{}
		err = decodeStrict(body, out.Infrastructure)
	case "Configuration":
		out.Configuration = &ConfigurationError{}
		if err = decodeStrict(body, out.Configuration); err == nil && out.Configuration.Kind == "" {
			err = errors.New("configuration error: empty kind")
		}
	case "Application":
		out.Application = &ApplicationError{}
		err = decodeStrict(body, out.Application)
	case "Poison":
		out.Poison = &PoisonError{}
		err = decodeStrict(body, out.Poison)
	}
	if err != nil {
		return fmt.Errorf("error details %s: %w", tag, err)
	}
	*d = out
	return nil
}

// Message returns a human-readable summary of the error.
func (d ErrorDetails) Message() string {
	switch {
	case d.Infrastructure != nil:
		return d.Infrastructure.Operation + ": " + d.Infrastructure.Message
	case d.Configuration != nil:
		if d.Configuration.Message != nil {
			return d.Configuration.Kind + ": " + *d.Configuration.Message
		}
		return d.Configuration.Kind + ": " + d.Configuration.Resource
	case d.Application != nil:
		return d.Application.Message
	case d.Poison != nil:
		return d.Poison.Message
	}
	return ""
}

// ---------------------------------------------------------------------------
// WorkItem

// WorkItem is a queue message. Its JSON is externally tagged:
// {"ActivityExecute":{...}}. The concrete types are the pointer types of
// this package listed in the WorkItem variants (StartOrchestration,
// ActivityExecute, ...). Decode with UnmarshalWorkItem.
type WorkItem interface {
	// WorkItemType returns the variant name (the JSON tag).
	WorkItemType() string
	// RoutingInstance returns the instance whose orchestrator queue the item
	// belongs to: the parent for sub-orchestration completions, else the
	// item's own instance.
	RoutingInstance() string
}

// StartOrchestration starts a new orchestration instance (orchestrator queue).
type StartOrchestration struct {
	Instance       string  `json:"instance"`
	Orchestration  string  `json:"orchestration"`
	Input          string  `json:"input"`
	Version        *string `json:"version"`
	ParentInstance *string `json:"parent_instance"`
	ParentID       *uint64 `json:"parent_id"`
	// ParentExecutionID is the execution of the parent that scheduled this
	// sub-orchestration, so its completion reaches that execution
	// (duroxide after 0.1.29). Nil for top-level starts and for items of
	// older runtimes, and then omitted from the JSON, so such an item
	// encodes exactly as in duroxide 0.1.29.
	ParentExecutionID *uint64 `json:"parent_execution_id,omitempty"`
	ExecutionID       uint64  `json:"execution_id"`
}

// ActivityExecute asks a worker to run an activity (worker queue only).
type ActivityExecute struct {
	Instance    string  `json:"instance"`
	ExecutionID uint64  `json:"execution_id"`
	ID          uint64  `json:"id"`
	Name        string  `json:"name"`
	Input       string  `json:"input"`
	SessionID   *string `json:"session_id,omitempty"`
	Tag         *string `json:"tag,omitempty"`
}

// ActivityCompleted reports an activity result to its orchestration.
type ActivityCompleted struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`
	Result      string `json:"result"`
}

// ActivityFailed reports an activity failure to its orchestration.
type ActivityFailed struct {
	Instance    string       `json:"instance"`
	ExecutionID uint64       `json:"execution_id"`
	ID          uint64       `json:"id"`
	Details     ErrorDetails `json:"details"`
}

// TimerFired fires a timer; it becomes visible at FireAtMS.
type TimerFired struct {
	Instance    string `json:"instance"`
	ExecutionID uint64 `json:"execution_id"`
	ID          uint64 `json:"id"`
	FireAtMS    uint64 `json:"fire_at_ms"`
}

// ExternalRaised delivers an external event.
type ExternalRaised struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
}

// SubOrchCompleted reports a sub-orchestration result to its parent.
type SubOrchCompleted struct {
	ParentInstance    string `json:"parent_instance"`
	ParentExecutionID uint64 `json:"parent_execution_id"`
	ParentID          uint64 `json:"parent_id"`
	Result            string `json:"result"`
}

// SubOrchFailed reports a sub-orchestration failure to its parent.
type SubOrchFailed struct {
	ParentInstance    string       `json:"parent_instance"`
	ParentExecutionID uint64       `json:"parent_execution_id"`
	ParentID          uint64       `json:"parent_id"`
	Details           ErrorDetails `json:"details"`
}

// CancelInstance asks an instance to cancel.
type CancelInstance struct {
	Instance string `json:"instance"`
	Reason   string `json:"reason"`
}

// ContinueAsNew starts the next execution of an instance.
//
// A sub-orchestration's ContinueAsNew carries its parent link (duroxide
// after 0.1.29) so a later execution can still report to the parent:
// ParentInstance, ParentID (the parent's SubOrchestrationScheduled event)
// and ParentExecutionID. Each is nil for a root instance and for items of
// older runtimes, and a nil one is omitted from the JSON, so a root
// ContinueAsNew encodes exactly as in duroxide 0.1.29.
type ContinueAsNew struct {
	Instance            string      `json:"instance"`
	Orchestration       string      `json:"orchestration"`
	Input               string      `json:"input"`
	Version             *string     `json:"version"`
	ParentInstance      *string     `json:"parent_instance,omitempty"`
	ParentID            *uint64     `json:"parent_id,omitempty"`
	ParentExecutionID   *uint64     `json:"parent_execution_id,omitempty"`
	CarryForwardEvents  [][2]string `json:"carry_forward_events"`
	InitialCustomStatus *string     `json:"initial_custom_status,omitempty"`
}

// QueueMessage is a persistent FIFO mailbox message.
type QueueMessage struct {
	Instance string `json:"instance"`
	Name     string `json:"name"`
	Data     string `json:"data"`
}

// WorkItemType implements WorkItem.
func (*StartOrchestration) WorkItemType() string { return "StartOrchestration" }

// WorkItemType implements WorkItem.
func (*ActivityExecute) WorkItemType() string { return "ActivityExecute" }

// WorkItemType implements WorkItem.
func (*ActivityCompleted) WorkItemType() string { return "ActivityCompleted" }

// WorkItemType implements WorkItem.
func (*ActivityFailed) WorkItemType() string { return "ActivityFailed" }

// WorkItemType implements WorkItem.
func (*TimerFired) WorkItemType() string { return "TimerFired" }

// WorkItemType implements WorkItem.
func (*ExternalRaised) WorkItemType() string { return "ExternalRaised" }

// WorkItemType implements WorkItem.
func (*SubOrchCompleted) WorkItemType() string { return "SubOrchCompleted" }

// WorkItemType implements WorkItem.
func (*SubOrchFailed) WorkItemType() string { return "SubOrchFailed" }

// WorkItemType implements WorkItem.
func (*CancelInstance) WorkItemType() string { return "CancelInstance" }

// WorkItemType implements WorkItem.
func (*ContinueAsNew) WorkItemType() string { return "ContinueAsNew" }

// WorkItemType implements WorkItem.
func (*QueueMessage) WorkItemType() string { return "QueueMessage" }

// RoutingInstance implements WorkItem.
func (w *StartOrchestration) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *ActivityExecute) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *ActivityCompleted) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *ActivityFailed) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *TimerFired) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *ExternalRaised) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *SubOrchCompleted) RoutingInstance() string { return w.ParentInstance }

// RoutingInstance implements WorkItem.
func (w *SubOrchFailed) RoutingInstance() string { return w.ParentInstance }

// RoutingInstance implements WorkItem.
func (w *CancelInstance) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *ContinueAsNew) RoutingInstance() string { return w.Instance }

// RoutingInstance implements WorkItem.
func (w *QueueMessage) RoutingInstance() string { return w.Instance }

func tagged(tag string, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	name, _ := json.Marshal(tag)
	out := make([]byte, 0, len(body)+len(name)+3)
	out = append(out, '{')
	out = append(out, name...)
	out = append(out, ':')
	out = append(out, body...)
	return append(out, '}'), nil
}

// MarshalJSON writes {"StartOrchestration":{...}}.
func (w *StartOrchestration) MarshalJSON() ([]byte, error) {
	type plain StartOrchestration
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"ActivityExecute":{...}}.
func (w *ActivityExecute) MarshalJSON() ([]byte, error) {
	type plain ActivityExecute
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"ActivityCompleted":{...}}.
func (w *ActivityCompleted) MarshalJSON() ([]byte, error) {
	type plain ActivityCompleted
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"ActivityFailed":{...}}.
func (w *ActivityFailed) MarshalJSON() ([]byte, error) {
	type plain ActivityFailed
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"TimerFired":{...}}.
func (w *TimerFired) MarshalJSON() ([]byte, error) {
	type plain TimerFired
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"ExternalRaised":{...}}.
func (w *ExternalRaised) MarshalJSON() ([]byte, error) {
	type plain ExternalRaised
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"SubOrchCompleted":{...}}.
func (w *SubOrchCompleted) MarshalJSON() ([]byte, error) {
	type plain SubOrchCompleted
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"SubOrchFailed":{...}}.
func (w *SubOrchFailed) MarshalJSON() ([]byte, error) {
	type plain SubOrchFailed
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"CancelInstance":{...}}.
func (w *CancelInstance) MarshalJSON() ([]byte, error) {
	type plain CancelInstance
	return tagged(w.WorkItemType(), (*plain)(w))
}

// MarshalJSON writes {"ContinueAsNew":{...}}; a nil CarryForwardEvents is written as [].
func (w *ContinueAsNew) MarshalJSON() ([]byte, error) {
	type plain ContinueAsNew
	p := plain(*w)
	if p.CarryForwardEvents == nil {
		p.CarryForwardEvents = [][2]string{}
	}
	return tagged(w.WorkItemType(), &p)
}

// MarshalJSON writes {"QueueMessage":{...}}.
func (w *QueueMessage) MarshalJSON() ([]byte, error) {
	type plain QueueMessage
	return tagged(w.WorkItemType(), (*plain)(w))
}

func newWorkItem(tag string) WorkItem {
	switch tag {
	case "StartOrchestration":
		return &StartOrchestration{}
	case "ActivityExecute":
		return &ActivityExecute{}
	case "ActivityCompleted":
		return &ActivityCompleted{}
	case "ActivityFailed":
		return &ActivityFailed{}
	case "TimerFired":
		return &TimerFired{}
	case "ExternalRaised":
		return &ExternalRaised{}
	case "SubOrchCompleted":
		return &SubOrchCompleted{}
	case "SubOrchFailed":
		return &SubOrchFailed{}
	case "CancelInstance":
		return &CancelInstance{}
	case "ContinueAsNew":
		return &ContinueAsNew{}
	case "QueueMessage":
		return &QueueMessage{}
	}
	return nil
}

// UnmarshalWorkItem decodes a work item the way duroxide does: an object
// with exactly one key, naming a known variant, whose value has every
// required (non-pointer) field; carry_forward_events defaults to []. Unknown fields
// are ignored.
func UnmarshalWorkItem(data []byte) (WorkItem, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("work item: %w", err)
	}
	if len(m) != 1 {
		return nil, fmt.Errorf("work item: want one variant key, got %d", len(m))
	}
	for tag, body := range m {
		w := newWorkItem(tag)
		if w == nil {
			return nil, fmt.Errorf("work item: unknown variant %q", tag)
		}
		if err := decodeStrict(body, w, "carry_forward_events"); err != nil {
			return nil, fmt.Errorf("work item %s: %w", tag, err)
		}
		if c, ok := w.(*ContinueAsNew); ok && c.CarryForwardEvents == nil {
			c.CarryForwardEvents = [][2]string{}
		}
		return w, nil
	}
	return nil, errors.New("work item: empty")
}

// ---------------------------------------------------------------------------
// Provider structs

// OrchestrationItem is one locked turn of an instance returned by
// Provider.FetchOrchestrationItem: the instance's current history and every
// visible message of the instance at fetch time. The lock is held until
// AckOrchestrationItem or AbandonOrchestrationItem with LockToken, or until
// it expires.
type OrchestrationItem struct {
	Instance          string
	OrchestrationName string // "Unknown" for an instance not created yet and no Start/ContinueAsNew in the batch
	ExecutionID       uint64
	Version           string // "unknown" when not known
	History           []Event
	Messages          []WorkItem
	// HistoryError is non-empty when the stored history could not be
	// decoded; History is then empty. The lock is held and the attempt
	// counted, so the runtime can poison the instance after max attempts.
	HistoryError string
	LockToken    string // token for ack, abandon and renew
	AttemptCount uint32 // the highest attempt count in the batch (>= 1)
	// KVSnapshot is the instance's key-value store as merged by its
	// completed executions (never nil; empty for none). Writes of the
	// current execution are not in it: the runtime rebuilds them by
	// replaying the KeyValue* events of History.
	KVSnapshot map[string]KvEntry
}

// KvEntry is one entry of an OrchestrationItem's KVSnapshot.
type KvEntry struct {
	Value           string
	LastUpdatedAtMS uint64 // from the KeyValueSet event that wrote it (the ack's clock if that was 0)
}

// Key-value limits of one instance (duroxide's runtime limits). The
// provider refuses an ack that breaks them within its own events with
// ErrInvalidInput before any SQL; the instance-wide key count (store and
// current execution together) is enforced by the runtime, which sees the
// merged view when it records a KeyValueSet.
const (
	MaxKVKeys       = 150       // distinct keys of an instance
	MaxKVValueBytes = 64 * 1024 // bytes of one value
)

// SystemStats are the storage figures of one instance
// (Provider.GetInstanceStats).
type SystemStats struct {
	HistoryEventCount uint64 // events of the current execution
	HistorySizeBytes  uint64 // bytes of their stored JSON
	// QueuePendingCount is the number of carry-forward events (pending
	// queue messages carried across ContinueAsNew) of the current
	// execution's OrchestrationStarted event, as duroxide counts it.
	QueuePendingCount uint64
	KVUserKeyCount    uint64 // distinct keys of the store and of non-tombstone current-execution writes
	KVTotalValueBytes uint64 // bytes of the stored values plus those of the current-execution writes
}

// ExecutionMetadata is what the runtime tells the provider about an
// execution at ack; the provider never inspects events to derive it
// (except custom status updates). Nil fields are left unchanged.
type ExecutionMetadata struct {
	Status                *string // Running, Completed, Failed or ContinuedAsNew
	Output                *string // result, error text, or ContinueAsNew input
	OrchestrationName     *string // with OrchestrationVersion: creates the instance row
	OrchestrationVersion  *string
	ParentInstanceID      *string
	PinnedDuroxideVersion *semver.Version // stored on the execution for capability filtering
}

// ScheduledActivityIdentifier names a scheduled activity (for cancellation).
type ScheduledActivityIdentifier struct {
	Instance    string
	ExecutionID uint64
	ActivityID  uint64
}

// OrchestrationAck is the outcome of one orchestration turn, written
// atomically by Provider.AckOrchestrationItem.
type OrchestrationAck struct {
	ExecutionID         uint64     // the execution the history delta belongs to
	HistoryDelta        []Event    // new events; every EventID > 0 and unique within the execution
	WorkerItems         []WorkItem // activities to schedule (worker queue)
	OrchestratorItems   []WorkItem // messages for this or other instances (timers, sub-orchestrations, ...)
	Metadata            ExecutionMetadata
	CancelledActivities []ScheduledActivityIdentifier // worker rows to delete ("lock stealing")
}

// WorkItemLease is a worker-queue item locked by Provider.FetchWorkItem.
type WorkItemLease struct {
	Item         WorkItem
	LockToken    string
	AttemptCount uint32
}

// SessionFetchConfig enables activity sessions on a worker fetch: items of a
// session are pinned to the owner holding the session lease.
type SessionFetchConfig struct {
	OwnerID     string        // all slots sharing it are one owner (typically the worker node id)
	LockTimeout time.Duration // session lease length; 0 = the item lock timeout
}

// TagFilterMode selects which activity tags a worker fetches.
type TagFilterMode int

// Tag filter modes. The zero value is TagDefaultOnly.
const (
	TagDefaultOnly TagFilterMode = iota // untagged items only
	TagTags                             // items whose tag is in Tags
	TagDefaultAnd                       // untagged items and items whose tag is in Tags
	TagAny                              // every item
	TagNone                             // nothing (fetch returns nil without a query)
)

// TagFilter restricts a worker fetch to activity tags. The zero value
// fetches untagged items only.
type TagFilter struct {
	Mode TagFilterMode
	Tags []string // for TagTags and TagDefaultAnd: 1..5 non-empty tags
}

// MaxWorkerTags is the most tags a TagFilter may list.
const MaxWorkerTags = 5

// Validate checks the filter's shape.
func (f TagFilter) Validate() error {
	switch f.Mode {
	case TagDefaultOnly, TagAny, TagNone:
		return nil
	case TagTags, TagDefaultAnd:
		if len(f.Tags) == 0 || len(f.Tags) > MaxWorkerTags {
			return fmt.Errorf("tag filter: want 1..%d tags, got %d", MaxWorkerTags, len(f.Tags))
		}
		for _, t := range f.Tags {
			if t == "" || len(t) > 256 {
				return errors.New("tag filter: tags must be 1..256 bytes")
			}
		}
		return nil
	}
	return fmt.Errorf("tag filter: unknown mode %d", f.Mode)
}

// SemverRange is an inclusive range of runtime versions. Only major, minor
// and patch are compared.
type SemverRange struct {
	Min, Max semver.Version
}

// Contains reports whether v lies in the range.
func (r SemverRange) Contains(v semver.Version) bool {
	return compareMMP(v, r.Min) >= 0 && compareMMP(v, r.Max) <= 0
}

func compareMMP(a, b semver.Version) int {
	for _, p := range [][2]uint64{{a.Major(), b.Major()}, {a.Minor(), b.Minor()}, {a.Patch(), b.Patch()}} {
		if p[0] < p[1] {
			return -1
		}
		if p[0] > p[1] {
			return 1
		}
	}
	return 0
}

// DispatcherCapabilityFilter lists the runtime versions a dispatcher can
// replay. An instance whose current execution is pinned to a version outside
// every range is skipped by FetchOrchestrationItem (never locked); unpinned
// executions always match. An empty list matches nothing.
type DispatcherCapabilityFilter struct {
	SupportedDuroxideVersions []SemverRange
}

// Compatible reports whether an execution pinned to v (nil = unpinned) matches.
func (f DispatcherCapabilityFilter) Compatible(v *semver.Version) bool {
	if v == nil {
		return true
	}
	for _, r := range f.SupportedDuroxideVersions {
		if r.Contains(*v) {
			return true
		}
	}
	return false
}

// CustomStatus is an instance's custom status and its version (incremented
// once per ack that changes it).
type CustomStatus struct {
	Status  *string // nil = cleared
	Version uint64
}

// InstanceInfo describes an instance and its current execution.
type InstanceInfo struct {
	InstanceID           string
	OrchestrationName    string
	OrchestrationVersion string // "unknown" if not recorded
	CurrentExecutionID   uint64
	Status               string  // of the current execution; "Running" if it has no row
	Output               *string // of the current execution
	CreatedAt            time.Time
	UpdatedAt            time.Time
	ParentInstanceID     *string
}

// ExecutionInfo describes one execution.
type ExecutionInfo struct {
	ExecutionID uint64
	Status      string
	Output      *string
	StartedAt   time.Time
	CompletedAt *time.Time
	EventCount  int64
}

// SystemMetrics counts instances, executions and events.
type SystemMetrics struct {
	TotalInstances     int64
	TotalExecutions    int64
	RunningInstances   int64 // instances whose current execution is Running
	CompletedInstances int64
	FailedInstances    int64
	TotalEvents        int64
}

// QueueDepths counts visible, unlocked messages per queue.
type QueueDepths struct {
	OrchestratorQueue int64
	WorkerQueue       int64
	TimerQueue        int64 // always 0: timers live in the orchestrator queue
}

// DeleteInstanceResult counts what a delete removed.
type DeleteInstanceResult struct {
	InstancesDeleted     int64
	ExecutionsDeleted    int64
	EventsDeleted        int64
	QueueMessagesDeleted int64
}

// Add returns the sum of r and o.
func (r DeleteInstanceResult) Add(o DeleteInstanceResult) DeleteInstanceResult {
	return DeleteInstanceResult{r.InstancesDeleted + o.InstancesDeleted, r.ExecutionsDeleted + o.ExecutionsDeleted,
		r.EventsDeleted + o.EventsDeleted, r.QueueMessagesDeleted + o.QueueMessagesDeleted}
}

// PruneOptions selects executions to prune; the fields are ANDed. The
// current execution and Running executions are never pruned.
type PruneOptions struct {
	KeepLast        int        // keep the newest KeepLast executions; 0 and 1 both keep only the current one
	CompletedBefore *time.Time // only executions completed before this time
}

// PruneResult counts what a prune removed.
type PruneResult struct {
	InstancesProcessed int64
	ExecutionsDeleted  int64
	EventsDeleted      int64
}

// InstanceFilter selects instances for bulk operations; the fields are ANDed.
type InstanceFilter struct {
	InstanceIDs     []string   // nil = any instance; a non-nil empty slice matches nothing
	CompletedBefore *time.Time // current execution completed before this time
	Limit           int        // 0 = DefaultBulkLimit
}

// DefaultBulkLimit is the instance limit of bulk operations when InstanceFilter.Limit is 0.
const DefaultBulkLimit = 1000

// InstanceTree is a root instance and all its descendants.
type InstanceTree struct {
	RootID string
	AllIDs []string // root first
}

// IsRootOnly reports whether the tree has no descendants.
func (t InstanceTree) IsRootOnly() bool { return len(t.AllIDs) == 1 }

// Size returns the number of instances in the tree.
func (t InstanceTree) Size() int { return len(t.AllIDs) }

// ---------------------------------------------------------------------------
// Estimates (ProviderAdminExt)

// CountKind says how a Count was obtained.
type CountKind uint8

// The kinds of a Count.
const (
	// CountExact: Value is the number of matching rows at the time of the
	// call (the count stayed below the estimate's cap).
	CountExact CountKind = iota
	// CountEstimated: the count reached the cap and Value was read from
	// the database's statistics instead of counted; it may be stale (see
	// the method's documentation for the source and how stale it can be).
	CountEstimated
	// CountAtLeast: the count reached the cap and no statistics were
	// available: the true count is Value (the cap) or more.
	CountAtLeast
)

// String returns "exact", "estimated" or "at_least".
func (k CountKind) String() string {
	switch k {
	case CountExact:
		return "exact"
	case CountEstimated:
		return "estimated"
	case CountAtLeast:
		return "at_least"
	}
	return fmt.Sprintf("CountKind(%d)", uint8(k))
}

// Count is one figure of an estimate: a value and how it was obtained.
type Count struct {
	Value int64
	Kind  CountKind
}

// Exact reports whether Value is an exact count.
func (c Count) Exact() bool { return c.Kind == CountExact }

// String returns the value, prefixed by "~" for an estimate and "≥" for a
// lower bound.
func (c Count) String() string {
	switch c.Kind {
	case CountEstimated:
		return fmt.Sprintf("~%d", c.Value)
	case CountAtLeast:
		return fmt.Sprintf("≥%d", c.Value)
	}
	return fmt.Sprint(c.Value)
}

// DefaultEstimateCap is EstimateOptions.Cap when it is 0: figures below
// 1,000 rows are exact, and a call reads at most about 6,000 rows or index
// entries (a few milliseconds on either database, whatever the tables'
// size).
const DefaultEstimateCap = 1000

// EstimateOptions tunes GetSystemMetricsEstimate and GetQueueDepthsEstimate.
type EstimateOptions struct {
	// Cap bounds each count: a figure is counted exactly while it stays
	// below Cap rows (reading at most Cap rows or index entries); one that
	// reaches Cap is estimated or reported as at least Cap. 0 means
	// DefaultEstimateCap; negative is ErrInvalidInput. The cost of a call
	// grows with Cap, not with the size of the tables.
	Cap int64
}

// SystemMetricsEstimate is SystemMetrics with each figure bounded in cost
// and marked exact, estimated or a lower bound. The status figures count
// executions with the status (SystemMetrics counts instances whose current
// execution has it): the same numbers as long as every Running, Completed
// or Failed execution is its instance's current one, which is how the
// runtime writes them (a superseded execution is ContinuedAsNew).
type SystemMetricsEstimate struct {
	TotalInstances     Count
	TotalExecutions    Count
	RunningInstances   Count // executions with status Running
	CompletedInstances Count // executions with status Completed
	FailedInstances    Count // executions with status Failed
	TotalEvents        Count
}

// Exact reports whether every figure is exact.
func (m SystemMetricsEstimate) Exact() bool {
	for _, c := range []Count{m.TotalInstances, m.TotalExecutions, m.RunningInstances, m.CompletedInstances, m.FailedInstances, m.TotalEvents} {
		if !c.Exact() {
			return false
		}
	}
	return true
}

// Values returns the figures as a SystemMetrics (estimates and lower
// bounds as they are).
func (m SystemMetricsEstimate) Values() SystemMetrics {
	return SystemMetrics{TotalInstances: m.TotalInstances.Value, TotalExecutions: m.TotalExecutions.Value,
		RunningInstances: m.RunningInstances.Value, CompletedInstances: m.CompletedInstances.Value,
		FailedInstances: m.FailedInstances.Value, TotalEvents: m.TotalEvents.Value}
}

// QueueDepthsEstimate is QueueDepths with each figure bounded in cost.
// Queue depths have no statistics: a figure is exact or at least the cap.
type QueueDepthsEstimate struct {
	OrchestratorQueue Count
	WorkerQueue       Count
}
