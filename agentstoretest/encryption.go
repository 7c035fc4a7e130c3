package agentstoretest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// encryptionTests: content encryption at rest (agentstore.WithContentCodec,
// docs/encryption.md). Content written through a handle with a codec reads
// back byte for byte through every read path, is stored as ciphertext,
// fails with a typed error naming the key when the key is wrong or
// missing (or the handle has no codec) and when it was moved to another
// row, survives a key rotation that runs beside writers, and Search
// refuses over it.
func encryptionTests() []test {
	return tests(
		test{"RoundTripEveryReadPath", testEncryptionRoundTrip},
		test{"StoredAsCiphertext", testEncryptionStoredAsCiphertext},
		test{"WrongOrMissingKeyIsKeyError", testEncryptionWrongKey},
		test{"StoreWithoutCodecRefusesCiphertext", testEncryptionNoCodec},
		test{"MovedCiphertextFails", testEncryptionMovedCiphertext},
		test{"RotationReencryptsEverything", testEncryptionRotation},
		test{"RotationBesideWriters", testEncryptionRotationConcurrent},
		test{"SearchRefuses", testEncryptionSearchRefuses},
		test{"EnvelopeShapedInputRefused", testEncryptionEnvelopeInput},
	)
}

// Markers of the plain text the tests write: none may be stored.
const (
	encMarkContent = "plaintext-content-marker"
	encMarkMeta    = "plaintext-metadata-marker"
	encMarkSummary = "plaintext-summary-marker"
	encMarkCompact = "plaintext-compact-marker"
	encMarkQueue   = "plaintext-queue-marker"
)

// testCodec returns an AES-GCM codec whose keys are derived from their
// names and tag (active first): the same tag and id give the same key.
func testCodec(t testing.TB, tag string, active string, others ...string) agentstore.ContentCodec {
	t.Helper()
	keys := map[string][]byte{}
	for _, id := range append([]string{active}, others...) {
		k := make([]byte, 32)
		copy(k, tag+"/"+id+"/0123456789abcdef0123456789abcdef")
		keys[id] = k
	}
	c, err := agentstore.NewAESGCMCodec(active, keys)
	if err != nil {
		t.Fatalf("NewAESGCMCodec: %v", err)
	}
	return c
}

// encFixture is a session holding every kind of encrypted content.
type encFixture struct {
	sid     uuid.UUID
	items   []uuid.UUID
	content json.RawMessage
	meta    json.RawMessage
}

// writeEncFixture writes through st: a session with a summary, two messages
// (content and metadata) and a compaction record (Save), two more messages
// (AppendMessages), a summary snapshot (AddSummary) and two queue items.
func writeEncFixture(t *testing.T, st Store) encFixture {
	t.Helper()
	ctx := context.Background()
	r, q := st.Sessions(), st.SessionQueue()
	f := encFixture{
		content: json.RawMessage(`[ {"type":"text","text":"` + encMarkContent + ` ✓"},  {"type":"x","z":[1,null]} ]`),
		meta:    json.RawMessage(`{"note":"` + encMarkMeta + `","n":1}`),
	}
	s := repo.NewSession()
	sum := encMarkSummary + " on the row"
	s.Summary = &sum
	s.AddMessage(repo.Message{ID: "m1", Role: repo.RoleUser, Content: f.content, Metadata: f.meta})
	s.AddMessage(textMsg("m2", repo.RoleAssistant, encMarkContent+" 2"))
	s.CompactHistory = []repo.CompactRecord{{Trigger: repo.TriggerManual, Summary: encMarkCompact, OriginalCount: 2, NewCount: 1}}
	mustSave(t, r, s)
	f.sid = s.ID
	if _, err := r.AppendMessages(ctx, s.ID, repo.Message{ID: "m3", Role: repo.RoleUser, Content: f.content, Metadata: f.meta},
		textMsg("m4", repo.RoleAssistant, encMarkContent+" 4")); err != nil {
		t.Fatalf("append: %v", err)
	}
	if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: encMarkSummary + " snapshot"}); err != nil {
		t.Fatalf("add summary: %v", err)
	}
	for i := range 2 {
		it, err := q.EnqueueWith(ctx, s.ID, repo.EnqueueParams{Content: fmt.Sprintf("%s %d", encMarkQueue, i), IdempotencyKey: fmt.Sprint("k", i)})
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
		f.items = append(f.items, it.ID)
	}
	return f
}

// checkEncFixture reads f back through st's read paths and compares it
// with what was written.
func checkEncFixture(t *testing.T, st Store, f encFixture) {
	t.Helper()
	ctx := context.Background()
	r, q := st.Sessions(), st.SessionQueue()
	got := mustLoad(t, r, f.sid)
	if len(got.Messages) != 4 {
		t.Fatalf("loaded %d messages, want 4", len(got.Messages))
	}
	for _, i := range []int{0, 2} {
		m := got.Messages[i]
		if !bytes.Equal(m.Content, f.content) {
			t.Fatalf("message %s content not byte for byte:\n got %s\nwant %s", m.ID, m.Content, f.content)
		}
		if !jsonEqual(m.Metadata, f.meta) {
			t.Fatalf("message %s metadata = %s, want %s", m.ID, m.Metadata, f.meta)
		}
	}
	if want := `[{"type":"text","text":"` + encMarkContent + ` 4"}]`; !jsonEqual(got.Messages[3].Content, json.RawMessage(want)) {
		t.Fatalf("message m4 content = %s", got.Messages[3].Content)
	}
	if got.Summary == nil || *got.Summary != encMarkSummary+" snapshot" {
		t.Fatalf("session summary = %v", got.Summary)
	}
	if len(got.CompactHistory) != 1 || got.CompactHistory[0].Summary != encMarkCompact {
		t.Fatalf("compacts = %+v", got.CompactHistory)
	}
	if tail := mustLoad(t, r, f.sid, repo.LoadOptions{LastN: 2}); len(tail.Messages) != 2 || !bytes.Equal(tail.Messages[0].Content, f.content) {
		t.Fatalf("LastN 2 = %v", msgIDs(tail.Messages))
	}
	br, err := r.LoadBranch(ctx, f.sid, "m3")
	if err != nil || len(br) != 3 || !bytes.Equal(br[2].Content, f.content) {
		t.Fatalf("LoadBranch m3 = %v, %v", msgIDs(br), err)
	}
	sums, err := r.GetSummaries(ctx, f.sid)
	if err != nil || len(sums) != 1 || sums[0].Summary != encMarkSummary+" snapshot" {
		t.Fatalf("GetSummaries = %+v, %v", sums, err)
	}
	page, _, err := r.GetSummariesPage(ctx, f.sid, repo.PageParams{Limit: 5})
	if err != nil || len(page) != 1 || page[0].Summary != sums[0].Summary {
		t.Fatalf("GetSummariesPage = %+v, %v", page, err)
	}
	want := func(i int) string { return fmt.Sprintf("%s %d", encMarkQueue, i) }
	it, err := q.Item(ctx, f.items[0])
	if err != nil || it.Content != want(0) {
		t.Fatalf("Item = %+v, %v", it, err)
	}
	items, err := q.Items(ctx, f.sid)
	if err != nil || len(items) != 2 || items[1].Content != want(1) {
		t.Fatalf("Items = %+v, %v", items, err)
	}
	pend, err := q.PendingQueue(ctx, f.sid)
	if err != nil || len(pend) != 2 || pend[0].Content != want(0) {
		t.Fatalf("PendingQueue = %+v, %v", pend, err)
	}
	pp, _, err := q.PendingQueuePage(ctx, f.sid, repo.PageParams{Limit: 1})
	if err != nil || len(pp) != 1 || pp[0].Content != want(0) {
		t.Fatalf("PendingQueuePage = %+v, %v", pp, err)
	}
}

// jsonEqual reports whether a and b are the same JSON document (jsonb
// reformats metadata on PostgreSQL without a codec).
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// testEncryptionRoundTrip: every kind of encrypted content reads back
// through every read path: Load (all, LastN), LoadBranch, GetSummaries
// (and paged), Item, Items, PendingQueue (and paged), Dequeue; an
// idempotent retry of an append and of an enqueue compares the plain
// content and returns the stored rows; a Fork's copies read back; an edit
// (SiblingOf) is encrypted like an append.
func testEncryptionRoundTrip(t *testing.T, h *harness) {
	st := h.New(t, withCodec(testCodec(t, "rt", "k1")))
	ctx := context.Background()
	f := writeEncFixture(t, st)
	checkEncFixture(t, st, f)
	// A second handle with the same key reads everything the first wrote.
	checkEncFixture(t, h.Open(t, withCodec(testCodec(t, "rt", "k1"))), f)
	r, q := st.Sessions(), st.SessionQueue()

	// Retries: the stored (encrypted) content equals the retried plain one.
	again, err := r.AppendMessages(ctx, f.sid, repo.Message{ID: "m3", Role: repo.RoleUser, Content: f.content, Metadata: f.meta},
		textMsg("m4", repo.RoleAssistant, encMarkContent+" 4"))
	if err != nil || len(again) != 2 || again[0].Seq != 3 || !bytes.Equal(again[0].Content, f.content) {
		t.Fatalf("append retry = %v, %v", msgSeqs(again), err)
	}
	if _, err := r.AppendMessages(ctx, f.sid, textMsg("m3", repo.RoleUser, "other")); !errors.Is(err, agentstore.ErrDuplicate) {
		t.Fatalf("append of m3 with other content = %v, want ErrDuplicate", err)
	}
	it, err := q.EnqueueWith(ctx, f.sid, repo.EnqueueParams{Content: encMarkQueue + " 0", IdempotencyKey: "k0"})
	if err != nil || it.ID != f.items[0] {
		t.Fatalf("enqueue retry = %+v, %v", it, err)
	}
	if _, err := q.EnqueueWith(ctx, f.sid, repo.EnqueueParams{Content: "other", IdempotencyKey: "k0"}); !errors.Is(err, agentstore.ErrDuplicate) {
		t.Fatalf("enqueue of k0 with other content = %v, want ErrDuplicate", err)
	}

	d, err := q.Dequeue(ctx, f.sid, repo.DequeueParams{Lease: time.Minute})
	if err != nil || d == nil || d.Content != encMarkQueue+" 0" {
		t.Fatalf("Dequeue = %+v, %v", d, err)
	}
	if err := q.Complete(ctx, d.Lease()); err != nil {
		t.Fatal(err)
	}

	// An edit, then a fork of the edited branch: the fork's copies are
	// bound to the fork's rows and read back.
	if _, err := r.AppendMessagesWith(ctx, f.sid, repo.AppendOptions{SiblingOf: "m4"},
		repo.Message{ID: "m4b", Role: repo.RoleAssistant, Content: f.content, Metadata: f.meta}); err != nil {
		t.Fatalf("edit: %v", err)
	}
	fork, err := r.Fork(ctx, f.sid, "")
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	if len(fork.Messages) != 4 || !bytes.Equal(fork.Messages[3].Content, f.content) || !jsonEqual(fork.Messages[3].Metadata, f.meta) ||
		fork.Summary == nil || *fork.Summary != encMarkSummary+" snapshot" {
		t.Fatalf("fork = %v summary %v", msgIDs(fork.Messages), fork.Summary)
	}
	again2 := mustLoad(t, r, fork.ID)
	if !bytes.Equal(again2.Messages[0].Content, f.content) || again2.Messages[3].ID != "m4b" {
		t.Fatalf("fork reloaded = %v", msgIDs(again2.Messages))
	}
}

// encColumns are the stored columns that hold encrypted content, with
// the rows of f they are checked on.
func encColumns(f encFixture) []struct {
	table, column string
	where         Row
} {
	return []struct {
		table, column string
		where         Row
	}{
		{models.TableMessages, "content", Row{"session_id": f.sid}},
		{models.TableMessages, "metadata", Row{"session_id": f.sid, "id": "m1"}},
		{models.TableMessages, "metadata", Row{"session_id": f.sid, "id": "m3"}},
		{models.TableSessions, "summary", Row{"id": f.sid}},
		{models.TableSummaries, "summary", Row{"session_id": f.sid}},
		{models.TableCompacts, "summary", Row{"session_id": f.sid}},
		{models.TableQueue, "content", Row{"session_id": f.sid}},
	}
}

// storedKeyIDs returns the key id of every stored encrypted value of f
// (failing when one is not an envelope or holds a plain marker).
func storedKeyIDs(t *testing.T, h *harness, st Store, f encFixture) []string {
	t.Helper()
	var kids []string
	for _, c := range encColumns(f) {
		vals := h.values(t, st, c.table, c.where, c.column)
		if len(vals) == 0 {
			t.Fatalf("no %s.%s rows", c.table, c.column)
		}
		for _, v := range vals {
			if strings.Contains(v, "plaintext-") {
				t.Fatalf("%s.%s stored in the clear: %s", c.table, c.column, v)
			}
			var env struct {
				Enc *struct {
					V   int    `json:"v"`
					Kid string `json:"kid"`
					Ct  []byte `json:"ct"`
				} `json:"$enc"`
			}
			if err := json.Unmarshal([]byte(v), &env); err != nil || env.Enc == nil || env.Enc.V != 1 || len(env.Enc.Ct) < 16 {
				t.Fatalf("%s.%s is not an encryption envelope: %s (%v)", c.table, c.column, v, err)
			}
			kids = append(kids, env.Enc.Kid)
		}
	}
	return kids
}

// testEncryptionStoredAsCiphertext: the stored values are envelopes
// naming the active key, and no plain text of any kind is stored (ids,
// roles and the like stay readable).
func testEncryptionStoredAsCiphertext(t *testing.T, h *harness) {
	st := h.New(t, withCodec(testCodec(t, "ct", "k1")))
	f := writeEncFixture(t, st)
	for _, kid := range storedKeyIDs(t, h, st, f) {
		if kid != "k1" {
			t.Fatalf("stored key id %q, want k1", kid)
		}
	}
	if roles := h.values(t, st, models.TableMessages, Row{"session_id": f.sid}, "role"); strings.Join(roles, ",") != "user,assistant,user,assistant" {
		t.Fatalf("roles stored as %v, want them in the clear", roles)
	}
}

// wantKeyError fails unless err is a *KeyError naming kid and matching
// cause.
func wantKeyError(t *testing.T, what string, err error, kid string, cause error) {
	t.Helper()
	var ke *agentstore.KeyError
	if !errors.As(err, &ke) || !errors.Is(err, cause) || ke.KeyID != kid {
		t.Fatalf("%s = %v, want a KeyError of key %q matching %v", what, err, kid, cause)
	}
	if strings.Contains(err.Error(), "plaintext-") {
		t.Fatalf("%s error carries content: %v", what, err)
	}
}

// readAllPaths reads f through st and returns the error of each path.
func readAllPaths(st Store, f encFixture) map[string]error {
	ctx := context.Background()
	r, q := st.Sessions(), st.SessionQueue()
	out := map[string]error{}
	_, out["Load"] = r.Load(ctx, f.sid)
	_, out["LoadBranch"] = r.LoadBranch(ctx, f.sid, "m1")
	_, out["GetSummaries"] = r.GetSummaries(ctx, f.sid)
	_, out["Item"] = q.Item(ctx, f.items[0])
	_, out["Items"] = q.Items(ctx, f.sid)
	_, out["PendingQueue"] = q.PendingQueue(ctx, f.sid)
	_, out["Dequeue"] = q.Dequeue(ctx, f.sid, repo.DequeueParams{Lease: time.Millisecond})
	_, out["Fork"] = r.Fork(ctx, f.sid, "")
	return out
}

// testEncryptionWrongKey: a handle whose key k1 is another key fails
// every read with ErrDecrypt naming k1; one without k1 with
// ErrKeyNotFound naming k1. Nothing is returned in place of content.
func testEncryptionWrongKey(t *testing.T, h *harness) {
	st := h.New(t, withCodec(testCodec(t, "right", "k1")))
	f := writeEncFixture(t, st)
	for path, err := range readAllPaths(h.Open(t, withCodec(testCodec(t, "wrong", "k1"))), f) {
		wantKeyError(t, "wrong key: "+path, err, "k1", agentstore.ErrDecrypt)
	}
	for path, err := range readAllPaths(h.Open(t, withCodec(testCodec(t, "right", "k2"))), f) {
		wantKeyError(t, "missing key: "+path, err, "k1", agentstore.ErrKeyNotFound)
	}
	// The right key still reads the session (the failed Dequeues leased
	// queue items: their leases run out, and they are claimable again).
	got := mustLoad(t, st.Sessions(), f.sid)
	if len(got.Messages) != 4 || !bytes.Equal(got.Messages[0].Content, f.content) {
		t.Fatalf("the right key reads %v", msgIDs(got.Messages))
	}
	time.Sleep(5 * time.Millisecond)
	d, err := st.SessionQueue().Dequeue(context.Background(), f.sid, repo.DequeueParams{Lease: time.Minute})
	if err != nil || d == nil || !strings.HasPrefix(d.Content, encMarkQueue) {
		t.Fatalf("the right key dequeues %+v, %v", d, err)
	}
}

// testEncryptionNoCodec: a handle without a codec reading encrypted rows
// fails with a KeyError (ErrKeyNotFound) naming the key, never returns the
// envelope as content; its own writes are stored in the clear and read by
// both.
func testEncryptionNoCodec(t *testing.T, h *harness) {
	enc := h.New(t, withCodec(testCodec(t, "nc", "k1")))
	f := writeEncFixture(t, enc)
	plain := h.Open(t)
	for path, err := range readAllPaths(plain, f) {
		wantKeyError(t, "no codec: "+path, err, "k1", agentstore.ErrKeyNotFound)
	}
	ctx := context.Background()
	s := repo.NewSession()
	s.AddMessage(textMsg("p1", repo.RoleUser, "written in the clear"))
	mustSave(t, plain.Sessions(), s)
	if v := h.value(t, plain, models.TableMessages, Row{"session_id": s.ID}, "content"); !strings.Contains(v, "written in the clear") {
		t.Fatalf("a handle without codec stored %s", v)
	}
	got, err := enc.Sessions().Load(ctx, s.ID)
	if err != nil || len(got.Messages) != 1 || !strings.Contains(string(got.Messages[0].Content), "written in the clear") {
		t.Fatalf("the codec handle reads plain rows: %v", err)
	}
}

// testEncryptionMovedCiphertext: a ciphertext copied into another row (of
// the same session or another) or another column does not decrypt there:
// ErrDecrypt naming the key, never the other row's content.
func testEncryptionMovedCiphertext(t *testing.T, h *harness) {
	st := h.New(t, withCodec(testCodec(t, "mv", "k1")))
	ctx := context.Background()
	f := writeEncFixture(t, st)
	g := writeEncFixture(t, st)
	r, q := st.Sessions(), st.SessionQueue()
	// m2's content into m4's row, same session.
	c2 := h.value(t, st, models.TableMessages, Row{"session_id": f.sid, "id": "m2"}, "content")
	h.update(t, st, models.TableMessages, Row{"session_id": f.sid, "id": "m4"}, Row{"content": c2})
	_, err := r.Load(ctx, f.sid)
	wantKeyError(t, "content moved within a session", err, "k1", agentstore.ErrDecrypt)
	// m1's content into g's m1 row (same message id, other session).
	c1 := h.value(t, st, models.TableMessages, Row{"session_id": f.sid, "id": "m1"}, "content")
	h.update(t, st, models.TableMessages, Row{"session_id": g.sid, "id": "m1"}, Row{"content": c1})
	_, err = r.LoadBranch(ctx, g.sid, "m1")
	wantKeyError(t, "content moved to another session", err, "k1", agentstore.ErrDecrypt)
	// A queue item's content into another item.
	qc := h.value(t, st, models.TableQueue, Row{"id": f.items[0]}, "content")
	h.update(t, st, models.TableQueue, Row{"id": f.items[1]}, Row{"content": qc})
	_, err = q.Item(ctx, f.items[1])
	wantKeyError(t, "queue content moved", err, "k1", agentstore.ErrDecrypt)
	// A summary snapshot's text into the session row's summary column.
	ss := h.value(t, st, models.TableSummaries, Row{"session_id": g.sid}, "summary")
	h.update(t, st, models.TableSessions, Row{"id": g.sid}, Row{"summary": ss})
	_, err = r.Load(ctx, g.sid)
	wantKeyError(t, "summary moved to another table", err, "k1", agentstore.ErrDecrypt)
}

// rotator returns st's ContentKeyRotator, or skips t.
func rotator(t *testing.T, st Store) ContentKeyRotator {
	t.Helper()
	rot, ok := st.(ContentKeyRotator)
	if !ok {
		t.Skipf("agentstoretest: the handle %T cannot rotate content keys (ContentKeyRotator)", st)
	}
	return rot
}

// testEncryptionRotation: rows written in the clear (before a codec) and
// under k1 are moved to k2 by RotateContentKeys (counts per table); then a
// handle holding k2 only reads everything, every stored value names k2,
// and a second rotation rewrites nothing.
func testEncryptionRotation(t *testing.T, h *harness) {
	ctx := context.Background()
	plain := writeEncFixture(t, h.New(t))
	old := writeEncFixture(t, h.Open(t, withCodec(testCodec(t, "rot", "k1"))))
	st := h.Open(t, withCodec(testCodec(t, "rot", "k2", "k1")))
	rot := rotator(t, st)
	if _, err := rot.RotateContentKeys(ctx, agentstore.RotateParams{BatchSize: -1}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Fatalf("negative batch = %v, want ErrInvalidInput", err)
	}
	rep, err := rot.RotateContentKeys(ctx, agentstore.RotateParams{BatchSize: 3})
	if err != nil {
		t.Fatalf("rotate: %v", err)
	}
	// Per fixture: 4 contents + 2 metadata, 1 session summary, 1
	// snapshot, 1 compact, 2 queue items.
	want := map[string]int64{models.TableMessages: 6, models.TableSessions: 1, models.TableSummaries: 1, models.TableCompacts: 1, models.TableQueue: 2}
	for table, n := range want {
		c := rep.Tables[table]
		if c.Encrypted != n || c.Reencrypted != n {
			t.Fatalf("%s: %+v, want %d encrypted and %d re-encrypted", table, c, n, n)
		}
	}
	if rep.KeyID != "k2" || rep.Tables[models.TableMessages].Rows != 8 {
		t.Fatalf("report %+v", rep)
	}
	only := h.Open(t, withCodec(testCodec(t, "rot", "k2")))
	for _, f := range []encFixture{plain, old} {
		checkEncFixture(t, only, f)
		for _, kid := range storedKeyIDs(t, h, only, f) {
			if kid != "k2" {
				t.Fatalf("after rotation a value is under %q", kid)
			}
		}
	}
	rep, err = rotator(t, only).RotateContentKeys(ctx, agentstore.RotateParams{})
	if err != nil {
		t.Fatal(err)
	}
	for table, c := range rep.Tables {
		if c.Encrypted != 0 || c.Reencrypted != 0 {
			t.Fatalf("second rotation rewrote %s: %+v", table, c)
		}
	}
	// A handle without a codec cannot rotate.
	if _, err := rotator(t, h.Open(t)).RotateContentKeys(ctx, agentstore.RotateParams{}); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Fatalf("rotate without codec = %v, want ErrInvalidConfig", err)
	}
}

// testEncryptionRotationConcurrent: writers append, enqueue and add
// summaries (with k2 active; at most 200 rounds each) while two rotations
// from k1 run in small batches; nothing fails, and afterwards a handle
// holding k2 only reads every session whole.
func testEncryptionRotationConcurrent(t *testing.T, h *harness) {
	ctx := context.Background()
	old := h.New(t, withCodec(testCodec(t, "conc", "k1")))
	var fixtures []encFixture
	for range 4 {
		fixtures = append(fixtures, writeEncFixture(t, old))
	}
	st := h.Open(t, withCodec(testCodec(t, "conc", "k2", "k1")))
	rot := rotator(t, st)
	writer := h.Open(t, withCodec(testCodec(t, "conc", "k2", "k1")))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 8)
	for w, f := range fixtures {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("w%d-%d", w, i)
				if _, err := writer.Sessions().AppendMessages(ctx, f.sid, repo.Message{ID: id, Role: repo.RoleUser, Content: f.content, Metadata: f.meta}); err != nil {
					errs <- fmt.Errorf("append %s: %w", id, err)
					return
				}
				if _, err := writer.SessionQueue().Enqueue(ctx, f.sid, id, 0); err != nil {
					errs <- fmt.Errorf("enqueue %s: %w", id, err)
					return
				}
				if _, err := writer.Sessions().AddSummary(ctx, repo.SummarySnapshot{SessionID: f.sid, Summary: id}); err != nil {
					errs <- fmt.Errorf("summary %s: %w", id, err)
					return
				}
			}
		}()
	}
	var rep agentstore.RotateReport
	var rerr error
	for range 2 { // the writers run through at least two rotations
		rep, rerr = rot.RotateContentKeys(ctx, agentstore.RotateParams{BatchSize: 2})
		if rerr != nil {
			break
		}
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if rerr != nil {
		t.Fatalf("rotate: %v", rerr)
	}
	if rep.KeyID != "k2" {
		t.Fatalf("report %+v", rep)
	}
	only := h.Open(t, withCodec(testCodec(t, "conc", "k2")))
	for _, f := range fixtures {
		got := mustLoad(t, only.Sessions(), f.sid)
		if len(got.Messages) < 4 {
			t.Fatalf("session %s after rotation: %v", f.sid, msgIDs(got.Messages))
		}
		for _, m := range got.Messages[4:] {
			if !bytes.Equal(m.Content, f.content) || !jsonEqual(m.Metadata, f.meta) {
				t.Fatalf("message %s after rotation: %s %s", m.ID, m.Content, m.Metadata)
			}
		}
		if _, err := only.SessionQueue().Items(ctx, f.sid); err != nil {
			t.Fatalf("items after rotation: %v", err)
		}
		if _, err := only.Sessions().GetSummaries(ctx, f.sid); err != nil {
			t.Fatalf("summaries after rotation: %v", err)
		}
	}
}

// testEncryptionSearchRefuses: Search on a handle with a codec refuses
// with ErrContentEncrypted (also ErrInvalidConfig), whatever the query,
// instead of finding nothing.
func testEncryptionSearchRefuses(t *testing.T, h *harness) {
	st := h.New(t, withCodec(testCodec(t, "s", "k1")))
	writeEncFixture(t, st)
	_, err := st.Sessions().Search(context.Background(), repo.SearchParams{Query: encMarkContent})
	if !errors.Is(err, agentstore.ErrContentEncrypted) || !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Fatalf("Search = %v, want ErrContentEncrypted", err)
	}
}

// testEncryptionEnvelopeInput: input shaped like an envelope (a JSON
// object whose only key is "$enc") is refused as metadata, summary and
// queue content, with or without a codec: stored, it would read as
// ciphertext.
func testEncryptionEnvelopeInput(t *testing.T, h *harness) {
	ctx := context.Background()
	env := `{"$enc":{"v":1,"kid":"k1","ct":"AAAA"}}`
	for _, st := range []Store{h.New(t), h.Open(t, withCodec(testCodec(t, "e", "k1")))} {
		r := st.Sessions()
		s := repo.NewSession()
		mustSave(t, r, s)
		_, err := r.AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`"x"`), Metadata: json.RawMessage(env)})
		if !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("envelope metadata = %v, want ErrInvalidInput", err)
		}
		if _, err := r.AddSummary(ctx, repo.SummarySnapshot{SessionID: s.ID, Summary: env}); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("envelope summary = %v, want ErrInvalidInput", err)
		}
		if _, err := st.SessionQueue().Enqueue(ctx, s.ID, env, 0); !errors.Is(err, agentstore.ErrInvalidInput) {
			t.Fatalf("envelope queue content = %v, want ErrInvalidInput", err)
		}
		// Objects that merely mention "$enc" are ordinary values.
		meta := json.RawMessage(`{"$enc":1,"other":true}`)
		if _, err := r.AppendMessages(ctx, s.ID, repo.Message{Role: repo.RoleUser, Content: json.RawMessage(`"x"`), Metadata: meta}); err != nil {
			t.Fatalf("metadata mentioning $enc: %v", err)
		}
		if got := mustLoad(t, r, s.ID); len(got.Messages) != 1 || !jsonEqual(got.Messages[0].Metadata, meta) {
			t.Fatalf("metadata mentioning $enc read back as %s", got.Messages[0].Metadata)
		}
	}
}
