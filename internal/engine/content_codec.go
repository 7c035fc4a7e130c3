package engine

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/google/uuid"
)

// ContentCodec encrypts and decrypts the content a Store keeps at rest
// (WithContentCodec; docs/encryption.md). A codec holds keys named by key
// ids: ActiveKeyID names the key new writes use; Decrypt is given the key id
// a stored value was written under, so that keys can rotate (old keys stay
// in the codec until Store.RotateContentKeys has moved every row off them).
//
// additionalData is authenticated but not encrypted: the Store passes the
// identity of the row and column the value belongs to, and Decrypt must
// fail when it differs from the one given to Encrypt (an AEAD does this), so
// that a ciphertext copied into another row is refused, never read as that
// row's content. Encrypt and Decrypt must be safe for concurrent use and
// must not retain or modify their arguments.
//
// Errors: Decrypt with a key id the codec does not hold must return an
// error matching ErrKeyNotFound; any other failure (tampered or moved
// ciphertext, wrong key) is reported by the Store as ErrDecrypt. The Store
// wraps both in a *KeyError naming the key id and the row.
type ContentCodec interface {
	// ActiveKeyID returns the id of the key Encrypt is called with for new
	// writes: 1 to MaxKeyIDLen bytes of valid UTF-8.
	ActiveKeyID() string
	// Encrypt returns the ciphertext of plaintext under the key keyID,
	// bound to additionalData.
	Encrypt(keyID string, plaintext, additionalData []byte) ([]byte, error)
	// Decrypt returns the plaintext of ciphertext, which Encrypt made under
	// keyID with the same additionalData.
	Decrypt(keyID string, ciphertext, additionalData []byte) ([]byte, error)
}

// MaxKeyIDLen is the longest content key id a Store accepts (the id is
// stored in every encrypted value's envelope).
const MaxKeyIDLen = 64

// The errors of content encryption. Every one is returned inside a
// *KeyError naming the key id (and the row), except ErrContentEncrypted.
var (
	// ErrKeyNotFound: a stored value is encrypted under a key id the
	// Store's codec does not hold (or the Store has no codec: opened
	// without WithContentCodec), or the active key is missing from it.
	ErrKeyNotFound = errors.New("agentstore: content key not found")
	// ErrDecrypt: a stored value could not be decrypted with its key: the
	// key is wrong, the ciphertext was altered or copied from another row,
	// or its envelope cannot be read.
	ErrDecrypt = errors.New("agentstore: content cannot be decrypted")
	// ErrContentEncrypted: the call needs the plain text of stored content
	// in the database (Sessions.Search) and the Store encrypts content
	// (WithContentCodec), so it refuses instead of returning nothing. It
	// also matches ErrInvalidConfig: the Store's configuration rules the
	// call out.
	ErrContentEncrypted error = &sentinelPair{"agentstore: content is encrypted (WithContentCodec): the database cannot search it", ErrInvalidConfig}
)

// sentinelPair is a sentinel that also matches a broader one.
type sentinelPair struct {
	msg    string
	parent error
}

func (e *sentinelPair) Error() string { return e.msg }
func (e *sentinelPair) Unwrap() error { return e.parent }

// KeyError reports content that could not be encrypted or decrypted: the
// key id, where the value is stored (the unprefixed table, the column and
// the row's key; empty for a write), and the cause: on a read it matches
// ErrKeyNotFound or ErrDecrypt (errors.Is); on a write it is the codec's
// error (ErrKeyNotFound when the codec lacks its active key). Content is never returned in
// place of an error: a row whose content cannot be decrypted fails the
// call that reads it.
type KeyError struct {
	KeyID  string
	Table  string
	Column string
	RowID  string
	Err    error
}

// Error names the key, the row and the cause.
func (e *KeyError) Error() string {
	where := ""
	if e.Table != "" {
		where = " (" + e.Table + "." + e.Column + ", row " + e.RowID + ")"
	}
	return "agentstore: content key " + strconv.Quote(e.KeyID) + where + ": " + e.Err.Error()
}

// Unwrap returns the cause (ErrKeyNotFound or ErrDecrypt, and the codec's
// error when there is one).
func (e *KeyError) Unwrap() error { return e.Err }

// aesGCMCodec is NewAESGCMCodec's codec.
type aesGCMCodec struct {
	active string
	aeads  map[string]cipher.AEAD
}

// NewAESGCMCodec returns a ContentCodec using AES-GCM (crypto/aes,
// crypto/cipher) with a random 96-bit nonce per value: keys maps key ids to
// AES keys of 16, 24 or 32 bytes (AES-128, -192, -256) and active names
// the one new writes use. The output is nonce || ciphertext || 16-byte tag
// (28 bytes over the plaintext). It refuses, with ErrInvalidConfig, an
// empty key map, a key of another size, a key id that is empty, longer than
// MaxKeyIDLen or not valid UTF-8, and an active id that is not in keys.
// The keys are copied. With random nonces one key should encrypt fewer than
// 2^32 values: rotate before (docs/encryption.md).
func NewAESGCMCodec(active string, keys map[string][]byte) (ContentCodec, error) {
	if len(keys) == 0 {
		return nil, configf("AES-GCM codec: no keys")
	}
	c := &aesGCMCodec{active: active, aeads: make(map[string]cipher.AEAD, len(keys))}
	for id, k := range keys {
		if err := checkKeyID(id); err != nil {
			return nil, err
		}
		switch len(k) {
		case 16, 24, 32:
		default:
			return nil, configf("AES-GCM codec: key %q is %d bytes; AES keys are 16, 24 or 32 bytes", id, len(k))
		}
		block, err := aes.NewCipher(bytes.Clone(k))
		if err != nil {
			return nil, configf("AES-GCM codec: key %q: %v", id, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, configf("AES-GCM codec: key %q: %v", id, err)
		}
		c.aeads[id] = aead
	}
	if _, ok := c.aeads[active]; !ok {
		return nil, configf("AES-GCM codec: the active key id %q is not among the keys", clip(active))
	}
	return c, nil
}

// checkKeyID checks a content key id.
func checkKeyID(id string) error {
	if id == "" || len(id) > MaxKeyIDLen || !utf8.ValidString(id) {
		return configf("content key id %q must be 1 to %d bytes of valid UTF-8", clip(id), MaxKeyIDLen)
	}
	return nil
}

// ActiveKeyID implements ContentCodec.
func (c *aesGCMCodec) ActiveKeyID() string { return c.active }

// Encrypt implements ContentCodec.
func (c *aesGCMCodec) Encrypt(keyID string, plaintext, additionalData []byte) ([]byte, error) {
	aead, ok := c.aeads[keyID]
	if !ok {
		return nil, ErrKeyNotFound
	}
	out := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	if _, err := rand.Read(out); err != nil {
		return nil, fmt.Errorf("nonce: %w", err)
	}
	return aead.Seal(out, out, plaintext, additionalData), nil
}

// Decrypt implements ContentCodec.
func (c *aesGCMCodec) Decrypt(keyID string, ciphertext, additionalData []byte) ([]byte, error) {
	aead, ok := c.aeads[keyID]
	if !ok {
		return nil, ErrKeyNotFound
	}
	n := aead.NonceSize()
	if len(ciphertext) < n+aead.Overhead() {
		return nil, errors.New("ciphertext too short")
	}
	pt, err := aead.Open(nil, ciphertext[:n], ciphertext[n:], additionalData)
	if err != nil {
		return nil, errors.New("message authentication failed")
	}
	return pt, nil
}

// The columns a codec encrypts: table, column. Their additional data is
// "agentstore/enc/v1", table, column, the session id and the row's own key
// (message id, summary / compact / queue item id; "" for the session row),
// NUL-separated: a value decrypts only in the row and column it was
// written for.
const (
	encMsgContent  = "content"
	encMsgMetadata = "metadata"
	encSummary     = "summary"
	encQueue       = "content"
)

// envelopePrefix starts every encrypted value as the Store writes it.
const envelopePrefix = `{"$enc":{"v":1,"kid":`

// envelope is the stored form of an encrypted value:
// {"$enc":{"v":1,"kid":"<key id>","ct":"<base64 ciphertext>"}}, a JSON
// object, so JSON columns stay valid JSON.
type envelope struct {
	Enc *envelopeBody `json:"$enc"`
}

// envelopeBody is the object under "$enc": format version, key id and
// ciphertext (base64 in JSON).
type envelopeBody struct {
	V   int    `json:"v"`
	Kid string `json:"kid"`
	Ct  []byte `json:"ct"`
}

// contentAD returns the additional data binding a value to its place.
func contentAD(table, column string, session uuid.UUID, rowKey string) []byte {
	b := make([]byte, 0, 64+len(rowKey))
	b = append(b, "agentstore/enc/v1\x00"...)
	b = append(b, table...)
	b = append(b, 0)
	b = append(b, column...)
	b = append(b, 0)
	b = append(b, session.String()...)
	b = append(b, 0)
	b = append(b, rowKey...)
	return b
}

// maybeEnvelope is the cheap test of a stored value: could it be an
// envelope (a JSON object naming "$enc")? Message content (an array or a
// string) never is; other values are then parsed (isEnvelope).
func maybeEnvelope(b []byte) bool {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i < len(b) && b[i] == '{' && bytes.Contains(b[i:], []byte(`"$enc"`))
}

// parseEnvelope parses a stored value: ok when it is an envelope (an
// object whose only key is "$enc", holding an object).
func parseEnvelope(b []byte) (envelope, bool) {
	if !maybeEnvelope(b) {
		return envelope{}, false
	}
	if e, ok := fastEnvelope(b); ok {
		return e, true
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 1 {
		return envelope{}, false
	}
	inner, ok := raw["$enc"]
	if !ok || len(inner) == 0 || inner[0] != '{' {
		return envelope{}, false
	}
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil || e.Enc == nil {
		// an object under "$enc" that is not ours: reported by openValue
		e.Enc = nil
		return e, true
	}
	return e, true
}

// fastEnvelope parses an envelope exactly as sealValue writes it (a key
// id without escapes); ok false for anything else, which the general parse
// then reads (jsonb's reordered form, escapes).
func fastEnvelope(b []byte) (envelope, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(envelopePrefix+`"`))
	if !ok {
		return jsonbEnvelope(b)
	}
	q := bytes.IndexByte(rest, '"')
	if q <= 0 || bytes.IndexByte(rest[:q], '\\') >= 0 {
		return envelope{}, false
	}
	kid := string(rest[:q])
	rest, ok = bytes.CutPrefix(rest[q+1:], []byte(`,"ct":"`))
	if !ok {
		return envelope{}, false
	}
	q = bytes.IndexByte(rest, '"')
	if q < 0 || !bytes.Equal(rest[q:], []byte(`"}}`)) {
		return envelope{}, false
	}
	ct := make([]byte, base64.StdEncoding.DecodedLen(q))
	n, err := base64.StdEncoding.Decode(ct, rest[:q])
	if err != nil {
		return envelope{}, false
	}
	var e envelope
	e.Enc = &envelopeBody{V: 1, Kid: kid, Ct: ct[:n]}
	return e, true
}

// jsonbEnvelope parses an envelope as PostgreSQL's jsonb prints it (keys
// by length, a space after ':' and ','): {"$enc": {"v": 1, "ct": "…",
// "kid": "…"}}.
func jsonbEnvelope(b []byte) (envelope, bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"$enc": {"v": 1, "ct": "`))
	if !ok {
		return envelope{}, false
	}
	q := bytes.IndexByte(rest, '"')
	if q < 0 {
		return envelope{}, false
	}
	b64 := rest[:q]
	rest, ok = bytes.CutPrefix(rest[q:], []byte(`", "kid": "`))
	if !ok {
		return envelope{}, false
	}
	q = bytes.IndexByte(rest, '"')
	if q <= 0 || bytes.IndexByte(rest[:q], '\\') >= 0 || !bytes.Equal(rest[q:], []byte(`"}}`)) {
		return envelope{}, false
	}
	ct := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, err := base64.StdEncoding.Decode(ct, b64)
	if err != nil {
		return envelope{}, false
	}
	return envelope{Enc: &envelopeBody{V: 1, Kid: string(rest[:q]), Ct: ct[:n]}}, true
}

// refuseEnvelope refuses, as input, a value shaped like an encrypted
// value's envelope: stored, it would be read as one.
func refuseEnvelope(what string, b []byte) error {
	if _, ok := parseEnvelope(b); ok {
		return invalidf(`%s is a JSON object whose only key is "$enc": that shape is reserved for encrypted content`, what)
	}
	return nil
}

// sealValue returns the envelope of plain encrypted with the Store's codec
// under its active key, bound to (table, column, session, rowKey); plain
// itself when the Store has no codec.
func (s *Store) sealValue(table, column string, session uuid.UUID, rowKey string, plain []byte) ([]byte, error) {
	c := s.cfg.codec
	if c == nil {
		return plain, nil
	}
	kid := c.ActiveKeyID()
	ct, err := c.Encrypt(kid, plain, contentAD(table, column, session, rowKey))
	if err != nil {
		// the codec's error as it came (ErrKeyNotFound when it lacks its
		// active key; a KMS's own error otherwise)
		return nil, &KeyError{KeyID: kid, Err: fmt.Errorf("encrypt %s.%s: %w", table, column, err)}
	}
	kidJSON, _ := json.Marshal(kid)
	out := make([]byte, 0, len(envelopePrefix)+len(kidJSON)+base64.StdEncoding.EncodedLen(len(ct))+12)
	out = append(out, envelopePrefix...)
	out = append(out, kidJSON...)
	out = append(out, `,"ct":"`...)
	out = base64.StdEncoding.AppendEncode(out, ct)
	out = append(out, `"}}`...)
	return out, nil
}

// sealString is sealValue of a text column.
func (s *Store) sealString(table, column string, session uuid.UUID, rowKey string, plain string) (string, error) {
	if s.cfg.codec == nil {
		return plain, nil
	}
	b, err := s.sealValue(table, column, session, rowKey, []byte(plain))
	return string(b), err
}

// openValue returns the plain value of a stored one: stored itself when it
// is not an envelope, else its decryption. An envelope the Store cannot
// decrypt (no codec, unknown key, wrong key, another row's ciphertext) is a
// *KeyError naming the key and the row.
func (s *Store) openValue(table, column string, session uuid.UUID, rowKey string, stored []byte) ([]byte, error) {
	e, ok := parseEnvelope(stored)
	if !ok {
		return stored, nil
	}
	rowID := session.String()
	if rowKey != "" {
		rowID += "/" + rowKey
	}
	fail := func(kid string, err error) error {
		return &KeyError{KeyID: kid, Table: table, Column: column, RowID: rowID, Err: err}
	}
	if e.Enc == nil || e.Enc.Kid == "" {
		return nil, fail("", fmt.Errorf("%w: unreadable envelope", ErrDecrypt))
	}
	if e.Enc.V != 1 {
		return nil, fail(e.Enc.Kid, fmt.Errorf("%w: envelope version %d is newer than this build's (1)", ErrDecrypt, e.Enc.V))
	}
	c := s.cfg.codec
	if c == nil {
		return nil, fail(e.Enc.Kid, fmt.Errorf("%w: the Store has no content codec (WithContentCodec)", ErrKeyNotFound))
	}
	pt, err := c.Decrypt(e.Enc.Kid, e.Enc.Ct, contentAD(table, column, session, rowKey))
	if err != nil {
		if errors.Is(err, ErrKeyNotFound) {
			return nil, fail(e.Enc.Kid, err)
		}
		return nil, fail(e.Enc.Kid, fmt.Errorf("%w: %w", ErrDecrypt, err))
	}
	if pt == nil {
		pt = []byte{}
	}
	return pt, nil
}

// openString is openValue of a text column.
func (s *Store) openString(table, column string, session uuid.UUID, rowKey string, stored string) (string, error) {
	if len(stored) == 0 || stored[0] != '{' {
		return stored, nil
	}
	b, err := s.openValue(table, column, session, rowKey, []byte(stored))
	return string(b), err
}

// envelopeKeyID returns the key id of a stored value ("" when it is
// plain, ok false when it is an envelope that cannot be read).
func envelopeKeyID(stored []byte) (kid string, ok bool) {
	e, is := parseEnvelope(stored)
	if !is {
		return "", true
	}
	if e.Enc == nil || e.Enc.Kid == "" {
		return "", false
	}
	return e.Enc.Kid, true
}
