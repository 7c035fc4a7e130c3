package engine

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestEnvelopeParsers: the fast parsers of sealValue's and jsonb's forms
// read what the general parse reads, and leave other shapes to it.
func TestEnvelopeParsers(t *testing.T) {
	t.Parallel()
	ct := []byte{0, 1, 2, 250, 251, 252, 7}
	want := envelopeBody{V: 1, Kid: "k-1", Ct: ct}
	compact, _ := json.Marshal(envelope{Enc: &want})
	for _, in := range []string{
		`{"$enc":{"v":1,"kid":"k-1","ct":"AAEC+vv8Bw=="}}`,
		`{"$enc": {"v": 1, "ct": "AAEC+vv8Bw==", "kid": "k-1"}}`,
		string(compact),
		` {"$enc" : {"ct":"AAEC+vv8Bw==", "kid":"k-1", "v":1}}`,
	} {
		e, ok := parseEnvelope([]byte(in))
		if !ok || e.Enc == nil || e.Enc.V != 1 || e.Enc.Kid != "k-1" || !bytes.Equal(e.Enc.Ct, ct) {
			t.Errorf("parseEnvelope(%s) = %+v, %v", in, e.Enc, ok)
		}
	}
	for _, in := range []string{`["$enc"]`, `{"$enc":1}`, `{"$enc":{"v":1},"x":2}`, `"{\"$enc\":{}}"`} {
		if e, ok := parseEnvelope([]byte(in)); ok && e.Enc != nil {
			t.Errorf("parseEnvelope(%s) = %+v, want no envelope", in, e.Enc)
		}
	}
	// an escaped key id takes the general parse
	e, ok := parseEnvelope([]byte(`{"$enc":{"v":1,"kid":"a\"b","ct":"AA=="}}`))
	if !ok || e.Enc == nil || e.Enc.Kid != `a"b` {
		t.Errorf("escaped kid: %+v %v", e.Enc, ok)
	}
}
