package agentstoretest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
	"github.com/agentstore/agentstore/repo/duroxide"
)

// exportImportTests are the ExportImport area's tests: Store.Export,
// Store.Import and Store.DeleteTenant.
func exportImportTests() []test {
	return tests(
		test{"RoundTripIntoEmptyStore", testExportRoundTrip},
		test{"ReimportChangesNothing", testReimportChangesNothing},
		test{"TruncatedStreamKeepsWholeSessionsAndResumes", testImportTruncatedResumes},
		test{"MalformedLineNamedAndRolledBack", testImportMalformedLine},
		test{"NewerStreamVersionRefused", testImportNewerVersion},
		test{"ChecksumMismatchRefused", testImportChecksumMismatch},
		test{"TenantAndSessionFilters", testExportFilters},
		test{"ParentMissingRefused", testImportParentMissing},
		test{"DeleteTenantReportsWhatItDeleted", testDeleteTenant},
	)
}

// transferer is what the area needs of a handle: agentstore Stores have it.
type transferer interface {
	Export(ctx context.Context, w io.Writer, p agentstore.ExportParams) (agentstore.ExportReport, error)
	Import(ctx context.Context, r io.Reader, p agentstore.ImportParams) (agentstore.ImportReport, error)
	DeleteTenant(ctx context.Context, tenant string) (agentstore.DeleteReport, error)
}

func transferOf(t *testing.T, st Store) transferer {
	t.Helper()
	x, ok := st.(transferer)
	if !ok {
		t.Skipf("agentstoretest: the handle %T has no Export/Import/DeleteTenant", st)
	}
	return x
}

// transferEnv is a populated source handle and an empty target handle (a
// second table prefix on the same backend).
type transferEnv struct {
	src, dst   Store
	xsrc, xdst transferer
	pop        testkit.Populated
	clock      *testClock
}

func newTransferEnv(t *testing.T, h *harness) *transferEnv {
	t.Helper()
	clock := newTestClock()
	src := h.New(t, withClock(clock.Now))
	dst := h.Open(t, withClock(clock.Now), withTablePrefix("dst_"))
	e := &transferEnv{src: src, dst: dst, xsrc: transferOf(t, src), xdst: transferOf(t, dst), clock: clock}
	e.pop = testkit.PopulateTransfer(t, src, clock, 2)
	return e
}

func exportAll(t *testing.T, x transferer, p agentstore.ExportParams) ([]byte, agentstore.ExportReport) {
	t.Helper()
	var buf bytes.Buffer
	rep, err := x.Export(context.Background(), &buf, p)
	if err != nil {
		t.Fatalf("export %+v: %v", p, err)
	}
	return buf.Bytes(), rep
}

func mustImport(t *testing.T, x transferer, stream []byte) agentstore.ImportReport {
	t.Helper()
	rep, err := x.Import(context.Background(), bytes.NewReader(stream), agentstore.ImportParams{})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	return rep
}

// lines splits a stream into its lines (each with its newline).
func lines(stream []byte) [][]byte {
	ls := bytes.SplitAfter(stream, []byte("\n"))
	if len(ls) > 0 && len(ls[len(ls)-1]) == 0 {
		ls = ls[:len(ls)-1]
	}
	return ls
}

// lineOf returns the index (0-based) of the first line of type typ that
// contains sub.
func lineOf(t *testing.T, stream []byte, typ, sub string) int {
	t.Helper()
	for i, l := range lines(stream) {
		if bytes.HasPrefix(l, []byte(`{"type":"`+typ+`"`)) && bytes.Contains(l, []byte(sub)) {
			return i
		}
	}
	t.Fatalf("no %s line containing %q", typ, sub)
	return -1
}

func wantImportError(t *testing.T, err error, target error, line int, record string) *agentstore.ImportError {
	t.Helper()
	var ie *agentstore.ImportError
	if !errors.As(err, &ie) || !errors.Is(err, target) {
		t.Fatalf("import error = %v, want an *ImportError matching %v", err, target)
	}
	if ie.Line != line || !strings.Contains(ie.Record, record) {
		t.Fatalf("import error names line %d record %q, want line %d record containing %q (%v)", ie.Line, ie.Record, line, record, err)
	}
	return ie
}

func exists(t *testing.T, st Store, id uuid.UUID) bool {
	t.Helper()
	_, err := st.Sessions().Load(context.Background(), id)
	if errors.Is(err, repo.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatalf("load %s: %v", id, err)
	}
	return true
}

// testExportRoundTrip: a populated store (both domains) exported and
// imported into an empty store exports the same bytes; ids, seqs, versions,
// timestamps, exact decimals and message bytes survive, and the target's
// queues go on after the imported rows.
func testExportRoundTrip(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	ctx := context.Background()
	stream, xrep := exportAll(t, e.xsrc, agentstore.ExportParams{})
	if !bytes.HasPrefix(stream, []byte(`{"format":"agentstore-export","version":1,`)) {
		t.Fatalf("stream header: %.80s", stream)
	}
	if xrep.Counts["session"] != 7 || xrep.Counts["instance"] != 2 || xrep.Counts["loose_orchestrator_item"] != 1 || xrep.Counts["message"] != int64(e.pop.Messages) {
		t.Fatalf("export counts %v, want 7 sessions, 2 instances, 1 loose item, %d messages", xrep.Counts, e.pop.Messages)
	}
	rep := mustImport(t, e.xdst, stream)
	if rep.SessionsImported != 7 || rep.InstancesImported != 2 || rep.QueueRowsImported != 1 || rep.Checksum != xrep.Checksum {
		t.Fatalf("import report %+v, export %+v", rep, xrep)
	}
	again, _ := exportAll(t, e.xdst, agentstore.ExportParams{})
	if !bytes.Equal(stream, again) {
		t.Fatalf("the imported store exports other bytes:\n%s", firstDiff(stream, again))
	}
	id := e.pop.Sessions["acme"][0]
	a, b := mustLoad(t, e.src.Sessions(), id), mustLoad(t, e.dst.Sessions(), id)
	if a.Version != b.Version || a.LastSeq != b.LastSeq || !a.UpdatedAt.Equal(b.UpdatedAt) || !a.CreatedAt.Equal(b.CreatedAt) ||
		b.TotalCostUSD.String() != e.pop.BigCost.String() || b.TotalCostUSD.Exponent() != e.pop.BigCost.Exponent() {
		t.Fatalf("session row: version %d/%d seq %d/%d updated %v/%v cost %s (exp %d), want %s (exp %d)", a.Version, b.Version, a.LastSeq, b.LastSeq,
			a.UpdatedAt, b.UpdatedAt, b.TotalCostUSD, b.TotalCostUSD.Exponent(), e.pop.BigCost, e.pop.BigCost.Exponent())
	}
	for i := range a.Messages {
		if string(a.Messages[i].Content) != string(b.Messages[i].Content) || a.Messages[i].Seq != b.Messages[i].Seq || !a.Messages[i].CreatedAt.Equal(b.Messages[i].CreatedAt) {
			t.Fatalf("message %d: %s seq %d, want %s seq %d", i, b.Messages[i].Content, b.Messages[i].Seq, a.Messages[i].Content, a.Messages[i].Seq)
		}
	}
	if f := mustLoad(t, e.dst.Sessions(), e.pop.Fork); f.ParentID == nil || *f.ParentID != id || f.ForkedFromSessionID == nil {
		t.Fatalf("fork's parent lost: %+v", f.ParentID)
	}
	// The target's queues continue after the imported rows (sequences moved).
	items, err := e.dst.SessionQueue().Items(ctx, id)
	if err != nil || len(items) != 3 {
		t.Fatalf("imported queue items = %d %v", len(items), err)
	}
	var maxSeq int64
	for _, it := range items {
		maxSeq = max(maxSeq, it.Seq)
	}
	for i := 0; i < 3; i++ {
		it, err := e.dst.SessionQueue().Enqueue(ctx, id, fmt.Sprint("after ", i), 0)
		if err != nil {
			t.Fatalf("enqueue after import: %v", err)
		}
		if it.Seq <= maxSeq {
			t.Fatalf("new item seq %d not after the imported %d", it.Seq, maxSeq)
		}
	}
	p := e.dst.Provider()
	if v, err := p.GetKVValue(ctx, "inst-done", "k1"); err != nil || v == nil || *v != "v1" {
		t.Fatalf("imported KV k1 = %v %v", v, err)
	}
	for i := 0; i < 3; i++ {
		if err := p.EnqueueForOrchestrator(ctx, &duroxide.ExternalRaised{Instance: "inst-run", Name: fmt.Sprint("e", i)}, 0); err != nil {
			t.Fatalf("orchestrator enqueue after import: %v", err)
		}
	}
	if err := p.EnqueueForWorker(ctx, testkit.Activity("inst-run", 1, 9)); err != nil {
		t.Fatalf("worker enqueue after import: %v", err)
	}
}

// firstDiff shows the first differing line of two streams.
func firstDiff(a, b []byte) string {
	la, lb := lines(a), lines(b)
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y []byte
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("line %d:\n- %s+ %s", i+1, x, y)
		}
	}
	return "(equal)"
}

// testReimportChangesNothing: importing the same stream again skips every
// session and instance and leaves the store as it was.
func testReimportChangesNothing(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	stream, _ := exportAll(t, e.xsrc, agentstore.ExportParams{})
	mustImport(t, e.xdst, stream)
	before, _ := exportAll(t, e.xdst, agentstore.ExportParams{})
	rep := mustImport(t, e.xdst, stream)
	if rep.SessionsImported != 0 || rep.SessionsSkipped != 7 || rep.InstancesImported != 0 || rep.InstancesSkipped != 2 || rep.QueueRowsSkipped != 1 {
		t.Fatalf("second import %+v, want everything skipped", rep)
	}
	after, _ := exportAll(t, e.xdst, agentstore.ExportParams{})
	if !bytes.Equal(before, after) {
		t.Fatalf("a second import changed the store:\n%s", firstDiff(before, after))
	}
	// A session stored at another version is a conflict, named.
	s := mustLoad(t, e.dst.Sessions(), e.pop.Sessions["globex"][0])
	s.State = repo.StateCompleted
	mustSave(t, e.dst.Sessions(), s)
	_, err := e.xdst.Import(context.Background(), bytes.NewReader(stream), agentstore.ImportParams{})
	wantImportError(t, err, repo.ErrConflict, lineOf(t, stream, "session", s.ID.String())+1, "session "+s.ID.String())
}

// testImportTruncatedResumes: a stream cut inside a session imports the
// sessions before it whole and not that one; importing the whole stream
// then completes the store.
func testImportTruncatedResumes(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	stream, _ := exportAll(t, e.xsrc, agentstore.ExportParams{})
	victim := e.pop.Sessions["globex"][0]
	cut := lineOf(t, stream, "todo", victim.String()) // inside the victim's group
	ls := lines(stream)
	part := bytes.Join(ls[:cut], nil)
	_, err := e.xdst.Import(context.Background(), bytes.NewReader(part), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrTruncatedStream, cut+1, "")
	if exists(t, e.dst, victim) {
		t.Fatal("the session cut by the truncation was imported")
	}
	for _, id := range e.pop.Sessions["acme"] {
		if !exists(t, e.dst, id) {
			t.Fatalf("session %s before the cut was not imported", id)
		}
	}
	// Half a line is truncation too.
	_, err = e.xdst.Import(context.Background(), bytes.NewReader(append(bytes.Join(ls[:cut], nil), ls[cut][:10]...)), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrTruncatedStream, cut+1, "")
	rep := mustImport(t, e.xdst, stream)
	if rep.SessionsSkipped == 0 || rep.SessionsImported == 0 || rep.SessionsSkipped+rep.SessionsImported != 7 {
		t.Fatalf("resumed import %+v", rep)
	}
	again, _ := exportAll(t, e.xdst, agentstore.ExportParams{})
	if !bytes.Equal(stream, again) {
		t.Fatalf("resumed store differs:\n%s", firstDiff(stream, again))
	}
}

// testImportMalformedLine: a line that is not JSON stops the import with
// its line number; its session is not imported, those before it are.
func testImportMalformedLine(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	stream, _ := exportAll(t, e.xsrc, agentstore.ExportParams{})
	victim := e.pop.Sessions["globex"][1]
	bad := lineOf(t, stream, "message", victim.String())
	ls := lines(stream)
	ls[bad] = []byte(`{"type":"message","data":{` + "\n")
	_, err := e.xdst.Import(context.Background(), bytes.NewReader(bytes.Join(ls, nil)), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrInvalidStream, bad+1, "")
	if exists(t, e.dst, victim) {
		t.Fatal("the session of the malformed line was imported")
	}
	if !exists(t, e.dst, e.pop.Sessions["globex"][0]) {
		t.Fatal("the session before the malformed line was not imported")
	}
	// An unknown column names its record.
	ls = lines(stream)
	ls[bad] = bytes.Replace(ls[bad], []byte(`"seq":`), []byte(`"sequence":`), 1)
	_, err = e.xdst.Import(context.Background(), bytes.NewReader(bytes.Join(ls, nil)), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrInvalidStream, bad+1, "message")
	// A record outside its session.
	ls = lines(stream)
	moved := append([][]byte{ls[0], ls[bad]}, ls[1:]...)
	_, err = e.xdst.Import(context.Background(), bytes.NewReader(bytes.Join(moved, nil)), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrInvalidStream, 2, "message "+victim.String())
}

// testImportNewerVersion: a stream of a newer format version is refused
// at its header; nothing is imported.
func testImportNewerVersion(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	stream, _ := exportAll(t, e.xsrc, agentstore.ExportParams{})
	newer := bytes.Replace(stream, []byte(`"version":1,`), []byte(`"version":2,`), 1)
	_, err := e.xdst.Import(context.Background(), bytes.NewReader(newer), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrUnsupportedStreamVersion, 1, "header")
	if exists(t, e.dst, e.pop.Sessions["acme"][0]) {
		t.Fatal("a session was imported from a refused stream")
	}
	_, err = e.xdst.Import(context.Background(), strings.NewReader("hello\n"), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrInvalidStream, 1, "header")
	_, err = e.xdst.Import(context.Background(), strings.NewReader(""), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrTruncatedStream, 1, "")
}

// testImportChecksumMismatch: a record changed after export (valid JSON)
// is caught by the trailer's checksum.
func testImportChecksumMismatch(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	stream, _ := exportAll(t, e.xsrc, agentstore.ExportParams{})
	changed := bytes.Replace(stream, []byte(`"summary":"so far"`), []byte(`"summary":"SO far"`), 1)
	if bytes.Equal(changed, stream) {
		t.Fatal("the test changed nothing")
	}
	n := len(lines(stream))
	_, err := e.xdst.Import(context.Background(), bytes.NewReader(changed), agentstore.ImportParams{})
	wantImportError(t, err, agentstore.ErrInvalidStream, n, "trailer")
	if !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("error does not say checksum: %v", err)
	}
	// A trailer with other counts.
	ls := lines(stream)
	ls = append(ls[:2], ls[3:]...) // drop a record
	_, err = e.xdst.Import(context.Background(), bytes.NewReader(bytes.Join(ls, nil)), agentstore.ImportParams{})
	if !errors.Is(err, agentstore.ErrInvalidStream) {
		t.Fatalf("a stream missing a record: %v", err)
	}
}

// testExportFilters: by tenant and by session list, only the selected
// sessions (and no provider instance) are written; a listed session that
// does not exist is ErrNotFound.
func testExportFilters(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	ctx := context.Background()
	stream, rep := exportAll(t, e.xsrc, agentstore.ExportParams{Tenant: "acme"})
	if rep.Counts["session"] != int64(len(e.pop.Sessions["acme"])) || rep.Counts["instance"] != 0 || rep.Counts["loose_orchestrator_item"] != 0 {
		t.Fatalf("tenant export counts %v", rep.Counts)
	}
	if bytes.Contains(stream, []byte(`"tenant_id":"globex"`)) || bytes.Contains(stream, []byte(`"tenant_id":null`)) {
		t.Fatal("tenant export holds another tenant's session")
	}
	mustImport(t, e.xdst, stream)
	for _, id := range e.pop.Sessions["acme"] {
		if !exists(t, e.dst, id) {
			t.Fatalf("acme session %s not imported", id)
		}
	}
	if exists(t, e.dst, e.pop.Sessions["globex"][0]) {
		t.Fatal("globex imported from an acme export")
	}
	pick := []uuid.UUID{e.pop.Sessions["globex"][1], e.pop.Sessions[""][0]}
	_, rep = exportAll(t, e.xsrc, agentstore.ExportParams{Sessions: pick})
	if rep.Counts["session"] != 2 || rep.Counts["instance"] != 0 {
		t.Fatalf("session-list export counts %v", rep.Counts)
	}
	if _, err := e.xsrc.Export(ctx, io.Discard, agentstore.ExportParams{Sessions: []uuid.UUID{uuid.New()}}); !errors.Is(err, repo.ErrNotFound) {
		t.Fatalf("export of a missing session: %v", err)
	}
	if _, err := e.xsrc.Export(ctx, io.Discard, agentstore.ExportParams{Tenant: "acme", Sessions: pick}); !errors.Is(err, repo.ErrInvalidInput) {
		t.Fatalf("tenant and sessions together: %v", err)
	}
}

// testImportParentMissing: a fork exported without its parent cannot be
// imported where the parent is not stored: an *ImportError naming the
// fork, matching ErrNotFound; with the parent stored it imports.
func testImportParentMissing(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	stream, _ := exportAll(t, e.xsrc, agentstore.ExportParams{Sessions: []uuid.UUID{e.pop.Fork}})
	_, err := e.xdst.Import(context.Background(), bytes.NewReader(stream), agentstore.ImportParams{})
	wantImportError(t, err, repo.ErrNotFound, 2, "session "+e.pop.Fork.String())
	if exists(t, e.dst, e.pop.Fork) {
		t.Fatal("the fork was imported without its parent")
	}
	parent, _ := exportAll(t, e.xsrc, agentstore.ExportParams{Sessions: []uuid.UUID{e.pop.Sessions["acme"][0]}})
	mustImport(t, e.xdst, parent)
	mustImport(t, e.xdst, stream)
	if !exists(t, e.dst, e.pop.Fork) {
		t.Fatal("the fork was not imported after its parent")
	}
}

// testDeleteTenant: DeleteTenant deletes the tenant's sessions and their
// rows, reports exactly what the tenant's export held, and leaves other
// tenants and the provider alone.
func testDeleteTenant(t *testing.T, h *harness) {
	e := newTransferEnv(t, h)
	ctx := context.Background()
	_, acme := exportAll(t, e.xsrc, agentstore.ExportParams{Tenant: "acme"})
	globexBefore, _ := exportAll(t, e.xsrc, agentstore.ExportParams{Tenant: "globex"})
	rep, err := e.xsrc.DeleteTenant(ctx, "acme")
	if err != nil {
		t.Fatal(err)
	}
	c := acme.Counts
	if rep.Tenant != "acme" || rep.Sessions != c["session"] || rep.Messages != c["message"] || rep.Compactions != c["compaction"] ||
		rep.Summaries != c["summary"] || rep.QueueItems != c["queue_item"] || rep.Todos != c["todo"] || rep.Plans != c["plan"] || rep.Sessions == 0 {
		t.Fatalf("delete report %+v, the tenant's export counts %v", rep, c)
	}
	for _, id := range e.pop.Sessions["acme"] {
		if exists(t, e.src, id) {
			t.Fatalf("session %s survived DeleteTenant", id)
		}
	}
	if _, after := exportAll(t, e.xsrc, agentstore.ExportParams{Tenant: "acme"}); after.Records != 0 {
		t.Fatalf("the deleted tenant still exports %v", after.Counts)
	}
	if globexAfter, _ := exportAll(t, e.xsrc, agentstore.ExportParams{Tenant: "globex"}); !bytes.Equal(globexBefore, globexAfter) {
		t.Fatal("DeleteTenant changed another tenant")
	}
	if v, err := e.src.Provider().GetKVValue(ctx, "inst-done", "k1"); err != nil || v == nil {
		t.Fatalf("DeleteTenant touched the provider: %v %v", v, err)
	}
	if rep, err := e.xsrc.DeleteTenant(ctx, "acme"); err != nil || rep.Sessions != 0 || rep.Messages != 0 {
		t.Fatalf("second DeleteTenant = %+v %v, want zeros", rep, err)
	}
	if _, err := e.xsrc.DeleteTenant(ctx, ""); !errors.Is(err, repo.ErrInvalidInput) {
		t.Fatalf("DeleteTenant(\"\") = %v", err)
	}
}
