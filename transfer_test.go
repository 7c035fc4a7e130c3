package agentstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/internal/testkit"
	"github.com/agentstore/agentstore/repo"
)

func exportBytes(t testing.TB, st *agentstore.Store, p agentstore.ExportParams) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := st.Export(context.Background(), &buf, p); err != nil {
		t.Fatalf("export: %v", err)
	}
	return buf.Bytes()
}

// TestCopySQLiteToPostgres: `agentstore copy` of a populated SQLite store
// (sessions and provider instances, a session of more messages than one
// export page) into a fresh PostgreSQL schema; both ends then export
// byte-identical streams, through the library and through `agentstore
// export`. A second copy imports nothing.
func TestCopySQLiteToPostgres(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	bin := buildCLI(t)
	clock := newTestClock()
	lite := newHarness(t, agentstore.SQLite)
	src := lite.New(t, agentstore.WithClock(clock.Now))
	pop := testkit.PopulateTransfer(t, src, clock, 3)
	testkit.AppendBulk(t, src.Sessions(), pop.Sessions[""][0], 1234, 40)
	pg := newHarness(t, agentstore.Postgres)

	r := runCLI(t, bin, "copy", "--from", lite.DSN, "--to", pg.DSN, "--to-schema", pg.Schema)
	r.want(t, 0, "copy")
	if !strings.Contains(r.stdout, "copied 10 sessions") || strings.Contains(r.stderr, "\r") {
		t.Fatalf("copy printed:\n%s\nstderr: %q", r.stdout, r.stderr)
	}
	dst := pg.Open(t)
	want := exportBytes(t, src, agentstore.ExportParams{})
	got := exportBytes(t, dst, agentstore.ExportParams{})
	if !bytes.Equal(want, got) {
		t.Fatalf("SQLite and PostgreSQL export different streams (%d and %d bytes):\n%s", len(want), len(got), streamDiff(want, got))
	}
	out := filepath.Join(t.TempDir(), "pg.jsonl")
	runCLI(t, bin, "export", "--dsn", pg.DSN, "--schema", pg.Schema, "-o", out).want(t, 0, "export")
	if b, err := os.ReadFile(out); err != nil || !bytes.Equal(b, want) {
		t.Fatalf("agentstore export wrote another stream (%v):\n%s", err, streamDiff(want, b))
	}
	// The tenant export is byte-identical too (its own header).
	if a, b := exportBytes(t, src, agentstore.ExportParams{Tenant: "acme"}), exportBytes(t, dst, agentstore.ExportParams{Tenant: "acme"}); !bytes.Equal(a, b) {
		t.Fatalf("tenant exports differ:\n%s", streamDiff(a, b))
	}
	r = runCLI(t, bin, "copy", "--from", lite.DSN, "--to", pg.DSN, "--to-schema", pg.Schema)
	r.want(t, 0, "copy")
	if !strings.Contains(r.stdout, "sessions: 0 imported, 10 already stored; instances: 0 imported, 2 already stored") {
		t.Fatalf("second copy: %s", r.stdout)
	}
}

// streamDiff shows the first differing line of two streams.
func streamDiff(a, b []byte) string {
	la, lb := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return "(equal)"
}

// TestImportSessionParentMissing: a fork exported without its parent,
// imported where the parent is not stored, is an *ImportError naming the
// line and the fork, matching ErrNotFound; nothing of it is written.
func TestImportSessionParentMissing(t *testing.T) {
	t.Parallel()
	forEachDialect(t, func(t *testing.T, h *harness) {
		clock := newTestClock()
		src := h.New(t, agentstore.WithClock(clock.Now))
		pop := testkit.PopulateTransfer(t, src, clock, 1)
		stream := exportBytes(t, src, agentstore.ExportParams{Sessions: []uuid.UUID{pop.Fork}})
		dst := h.New(t, agentstore.WithTablePrefix("dst_"))
		rep, err := dst.Import(context.Background(), bytes.NewReader(stream), agentstore.ImportParams{})
		var ie *agentstore.ImportError
		if !errors.As(err, &ie) || !errors.Is(err, agentstore.ErrNotFound) || ie.Line != 2 || ie.Record != "session "+pop.Fork.String() {
			t.Fatalf("import of an orphan fork: %v (%+v)", err, ie)
		}
		if !strings.Contains(err.Error(), "parent session") || rep.SessionsImported != 0 {
			t.Fatalf("error %q, report %+v", err, rep)
		}
		if _, err := dst.Sessions().Load(context.Background(), pop.Fork); !errors.Is(err, repo.ErrNotFound) {
			t.Fatalf("the orphan fork was stored: %v", err)
		}
	})
}

// copyMessagesEnv sets the number of messages TestCopyMemory copies.
const copyMessagesEnv = "AGENTSTORE_COPY_MESSAGES"

// heapPeak samples the heap in use every 20 ms until stop is called and
// returns the largest HeapAlloc seen.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var ms runtime.MemStats
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// copyMessageSize is the text size of TestCopyMemory's messages.
const copyMessageSize = 2000

// TestCopyMemory copies N messages of 2 KB (AGENTSTORE_COPY_MESSAGES, or
// 2e4 with AGENTSTORE_LONG_TESTS=1: 40 MB of text; CI runs it in its
// load-test step, without -race) from SQLite into
// PostgreSQL through Export piped into Import, sampling the heap: the peak
// must stay under 24 MB over the heap before the copy, less than the
// data, so a copy that held the data would fail (it is bounded by the
// export page and the import batch). It logs the peak heap and the
// throughput of the copy and of the export alone.
func TestCopyMemory(t *testing.T) {
	n := 0
	if v := os.Getenv(copyMessagesEnv); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 1 {
			t.Fatalf("%s=%q: want a number of messages", copyMessagesEnv, v)
		}
		n = int(f)
	} else if os.Getenv(longTestsEnv) == "1" {
		n = 20_000
	}
	if n == 0 {
		t.Skipf("set %s=N (or %s=1 for 2e4) to copy N messages and measure the heap", copyMessagesEnv, longTestsEnv)
	}
	requirePostgres(t)
	ctx := context.Background()
	lite := newHarness(t, agentstore.SQLite)
	src := lite.New(t)
	const perSession = 1000
	for done := 0; done < n; done += perSession {
		s := repo.NewSession()
		s.TenantID = "bulk"
		if err := src.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		testkit.AppendBulk(t, src.Sessions(), s.ID, min(perSession, n-done), copyMessageSize)
	}
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)

	stop := heapPeak()
	start := time.Now()
	xrep, err := src.Export(ctx, io.Discard, agentstore.ExportParams{})
	exportTook := time.Since(start)
	exportPeak := stop()
	if err != nil {
		t.Fatal(err)
	}

	pg := newHarness(t, agentstore.Postgres)
	dst := pg.New(t)
	runtime.GC()
	stop = heapPeak()
	start = time.Now()
	pr, pw := io.Pipe()
	var exErr error
	go func() {
		_, exErr = src.Export(ctx, pw, agentstore.ExportParams{})
		pw.CloseWithError(exErr)
	}()
	rep, err := dst.Import(ctx, pr, agentstore.ImportParams{})
	copyTook := time.Since(start)
	copyPeak := stop()
	if err != nil || exErr != nil {
		t.Fatalf("copy: %v (export: %v)", err, exErr)
	}
	if rep.Counts["message"] != int64(n) || xrep.Counts["message"] != int64(n) {
		t.Fatalf("copied %d messages (exported %d), want %d", rep.Counts["message"], xrep.Counts["message"], n)
	}
	mb := func(b uint64) float64 { return float64(b) / (1 << 20) }
	t.Logf("%d messages: export %.0f msg/s (%v), peak heap %.1f MB; copy SQLite→PostgreSQL %.0f msg/s (%v), peak heap %.1f MB (heap before: %.1f MB)",
		n, float64(n)/exportTook.Seconds(), exportTook.Round(time.Millisecond), mb(exportPeak),
		float64(n)/copyTook.Seconds(), copyTook.Round(time.Millisecond), mb(copyPeak), mb(base.HeapAlloc))
	// Bounded: pages of 500 messages and batches of 250, never the data
	// (n × 2 KB: 40 MB at the CI's 2e4).
	if limit := uint64(24 << 20); copyPeak > base.HeapAlloc+limit {
		t.Fatalf("peak heap %.1f MB grew beyond %.1f MB over the %.1f MB before the copy", mb(copyPeak), mb(limit), mb(base.HeapAlloc))
	}
}

// TestExportImportEncrypted: a store written with a content codec exports
// its ciphertext as stored; imported into another dialect, a store with the
// same keys reads the plaintext back (the envelope's row binding survives
// the move), the two ends export the same bytes, and a store without the
// codec reading the imported rows gets a KeyError, never the envelope.
func TestExportImportEncrypted(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	ctx := context.Background()
	codec, err := agentstore.NewAESGCMCodec("k1", map[string][]byte{"k1": bytes.Repeat([]byte{7}, 32)})
	if err != nil {
		t.Fatal(err)
	}
	clock := newTestClock()
	lite := newHarness(t, agentstore.SQLite)
	src := lite.New(t, agentstore.WithClock(clock.Now), agentstore.WithContentCodec(codec))
	pop := testkit.PopulateTransfer(t, src, clock, 1)
	var stream bytes.Buffer
	if _, err := src.Export(ctx, &stream, agentstore.ExportParams{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(stream.Bytes(), []byte(`$enc`)) {
		t.Fatal("the export of an encrypted store carries no envelope")
	}
	pg := newHarness(t, agentstore.Postgres)
	dst := pg.New(t, agentstore.WithContentCodec(codec))
	if _, err := dst.Import(ctx, bytes.NewReader(stream.Bytes()), agentstore.ImportParams{}); err != nil {
		t.Fatalf("import: %v", err)
	}
	if got := exportBytes(t, dst, agentstore.ExportParams{}); !bytes.Equal(got, stream.Bytes()) {
		t.Fatalf("the two ends export different streams:\n%s", streamDiff(stream.Bytes(), got))
	}
	n := 0
	for _, ids := range pop.Sessions {
		for _, id := range ids {
			a, err := src.Sessions().Load(ctx, id, repo.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b, err := dst.Sessions().Load(ctx, id, repo.LoadOptions{})
			if err != nil {
				t.Fatalf("load %s after import: %v", id, err)
			}
			if len(a.Messages) != len(b.Messages) || len(a.Messages) == 0 {
				t.Fatalf("session %s: %d messages, imported %d", id, len(a.Messages), len(b.Messages))
			}
			for i := range a.Messages {
				if !bytes.Equal(a.Messages[i].Content, b.Messages[i].Content) || !bytes.Equal(a.Messages[i].Metadata, b.Messages[i].Metadata) {
					t.Fatalf("session %s message %d: %s / %s, imported %s / %s", id, i, a.Messages[i].Content, a.Messages[i].Metadata,
						b.Messages[i].Content, b.Messages[i].Metadata)
				}
				n++
			}
		}
	}
	plain := pg.Open(t)
	_, err = plain.Sessions().Load(ctx, pop.Sessions["acme"][0], repo.LoadOptions{})
	var ke *agentstore.KeyError
	if !errors.As(err, &ke) || ke.KeyID != "k1" || !errors.Is(err, agentstore.ErrKeyNotFound) {
		t.Fatalf("load without the codec: %v, want a KeyError naming k1", err)
	}
	t.Logf("%d encrypted messages moved SQLite -> PostgreSQL and read back", n)
}
