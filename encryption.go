package agentstore

import (
	"context"

	"github.com/agentstore/agentstore/internal/engine"
)

// ContentCodec encrypts and decrypts the content a Store keeps at rest; see
// WithContentCodec and docs/encryption.md. Implement it to keep keys in a
// KMS, or use NewAESGCMCodec. ActiveKeyID names the key new writes use;
// Decrypt gets the key id a value was stored under, so keys rotate.
// additionalData (the identity of the value's row and column) must be
// authenticated: Decrypt fails when it differs from Encrypt's. Decrypt of
// an unknown key id must return an error matching ErrKeyNotFound. Both
// methods must be safe for concurrent use.
type ContentCodec = engine.ContentCodec

// MaxKeyIDLen is the longest content key id (ContentCodec.ActiveKeyID, the
// keys of NewAESGCMCodec): 64 bytes.
const MaxKeyIDLen = engine.MaxKeyIDLen

// KeyError reports content that could not be encrypted or decrypted: the
// key id, the unprefixed table, column and row of the stored value (empty
// for a write) and the cause, matching ErrKeyNotFound or ErrDecrypt. A
// value that cannot be decrypted fails the call that reads it; its
// ciphertext is never returned as content.
type KeyError = engine.KeyError

// The errors of content encryption (WithContentCodec).
var (
	// ErrKeyNotFound: the key a stored value names is not in the Store's
	// codec, or the Store has no codec (opened without WithContentCodec),
	// or the codec lacks its active key. Inside a *KeyError naming the key
	// id and the row.
	ErrKeyNotFound = engine.ErrKeyNotFound
	// ErrDecrypt: a stored value does not decrypt with its key (a wrong
	// key under the same id, altered ciphertext, a ciphertext copied from
	// another row or column, an unreadable or newer envelope). Inside a
	// *KeyError naming the key id and the row.
	ErrDecrypt = engine.ErrDecrypt
	// ErrContentEncrypted: Sessions.Search on a Store with a content codec:
	// the database holds only ciphertext, so search refuses rather than
	// finding nothing. It also matches ErrInvalidConfig.
	ErrContentEncrypted = engine.ErrContentEncrypted
)

// NewAESGCMCodec returns a ContentCodec using AES-GCM from the standard
// library (crypto/aes, crypto/cipher), a random 96-bit nonce per value:
// keys maps key ids to AES keys of 16, 24 or 32 bytes and active names the
// key new writes use. ErrInvalidConfig for no keys, a key of another size,
// a key id that is empty, longer than MaxKeyIDLen or not valid UTF-8, or
// an active id not in keys. The key bytes are copied.
func NewAESGCMCodec(active string, keys map[string][]byte) (ContentCodec, error) {
	return engine.NewAESGCMCodec(active, keys)
}

// WithContentCodec encrypts content at rest with c: message content and
// metadata, summaries (summary snapshots, the session row's latest summary,
// compaction records' summaries) and session-queue item content are
// encrypted before they reach the database, as a JSON envelope
// {"$enc":{"v":1,"kid":"<key id>","ct":"<base64>"}} bound to its row and
// column, and decrypted on every read. Ids, roles, states, timestamps,
// token usage, environment, todos, plans and the change feed stay in the
// clear. Sessions.Search then refuses with ErrContentEncrypted. Values
// written in the clear before the option was set are still read;
// Store.RotateContentKeys encrypts them and moves older keys' values to
// the active key. A nil codec or an invalid active key id is
// ErrInvalidConfig. See docs/encryption.md for what it costs.
func WithContentCodec(c ContentCodec) Option { return engine.WithContentCodec(c) }

// Limits of RotateParams.BatchSize.
const (
	// DefaultRotateBatch is RotateContentKeys's batch when BatchSize is 0.
	DefaultRotateBatch = engine.DefaultRotateBatch
	// MaxRotateBatch is the largest batch RotateContentKeys accepts.
	MaxRotateBatch = engine.MaxRotateBatch
)

// RotateParams configures Store.RotateContentKeys: BatchSize rows are read
// and rewritten in one transaction at a time (0: DefaultRotateBatch).
type RotateParams = engine.RotateParams

// RotateReport is what Store.RotateContentKeys did: the active key id and,
// per unprefixed table, the rows read and the values re-encrypted (from an
// older key) or encrypted (stored in the clear).
type RotateReport = engine.RotateReport

// RotateCounts are the counts of one table in a RotateReport.
type RotateCounts = engine.RotateCounts

// RotateContentKeys moves every stored value of encrypted content to the
// codec's active key: values under another key id are decrypted and
// encrypted again, values stored in the clear are encrypted. Each table is
// walked in primary-key order, p.BatchSize rows at a time, each batch's
// rewrites committed in a short transaction of its own: the Store and
// other writers keep working meanwhile (no downtime). When it returns
// without error the older keys can be removed from the codec. Errors: a
// Store without a codec is ErrInvalidConfig; a batch size below 0 or above
// MaxRotateBatch ErrInvalidInput; a value no key of the codec decrypts a
// *KeyError naming its key and row (the batches before it stay committed;
// the report counts them).
func (s *Store) RotateContentKeys(ctx context.Context, p RotateParams) (RotateReport, error) {
	return s.e.RotateContentKeys(ctx, p)
}
