package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
)

// progress prints a one-line progress display, rewritten in place at most
// every 200 ms, when out is a terminal; otherwise nothing.
type progress struct {
	mu   sync.Mutex
	out  io.Writer
	verb string
	last time.Time
	on   bool
}

func newProgress(stderr io.Writer, verb string) *progress {
	p := &progress{out: stderr, verb: verb}
	if f, ok := stderr.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.on = true
		}
	}
	return p
}

// update is an ExportParams/ImportParams Progress callback.
func (p *progress) update(tp agentstore.TransferProgress) {
	if !p.on {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if time.Since(p.last) < 200*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.out, "\r%s %d sessions, %d instances, %d messages, %d records", p.verb, tp.Sessions, tp.Instances, tp.Messages, tp.Records)
}

// done ends the progress line.
func (p *progress) done() {
	if p.on && !p.last.IsZero() {
		fmt.Fprintln(p.out)
	}
}

func cmdExport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newFlags("export", stderr, true)
	tenant := c.fs.String("tenant", "", "export only this tenant's sessions (no provider instances)")
	sessions := c.fs.String("session", "", "export only these sessions: comma-separated ids (no provider instances)")
	out := c.fs.String("o", "", "write the stream to this file (default: stdout)")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	var p agentstore.ExportParams
	p.Tenant = *tenant
	if *sessions != "" {
		for _, s := range strings.Split(*sessions, ",") {
			id, err := uuid.Parse(strings.TrimSpace(s))
			if err != nil {
				fmt.Fprintf(stderr, "agentstore export: --session: %q is not a session id\n", s)
				return exitError
			}
			p.Sessions = append(p.Sessions, id)
		}
	}
	if p.Tenant != "" && p.Sessions != nil {
		fmt.Fprintf(stderr, "agentstore export: --tenant and --session exclude each other\n")
		return exitError
	}
	st, ok := c.open(ctx, "export", stderr, agentstore.WithReadOnly())
	if !ok {
		return exitError
	}
	defer st.Close()
	w := stdout
	var f *os.File
	if *out != "" {
		var err error
		if f, err = os.Create(*out); err != nil {
			fmt.Fprintf(stderr, "agentstore export: %s\n", cliErr(err))
			return exitError
		}
		w = f
	}
	pr := newProgress(stderr, "exported")
	p.Progress = pr.update
	rep, err := st.Export(ctx, w, p)
	pr.done()
	if f != nil {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			_ = os.Remove(*out) // never leave a stream without its trailer behind
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentstore export: %s\n", cliErr(err))
		return exitError
	}
	fmt.Fprintf(stderr, "exported %s\n", summary(rep.Records, rep.Counts, rep.Checksum))
	return exitOK
}

// summary is the one-line account of a stream's records.
func summary(records int64, counts map[string]int64, sum string) string {
	return fmt.Sprintf("%d sessions, %d messages, %d instances, %d records (%s)",
		counts["session"], counts["message"], counts["instance"], records, sum)
}

func cmdImport(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newFlags("import", stderr, true)
	in := c.fs.String("i", "", "read the stream from this file (default: stdin)")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	st, ok := c.open(ctx, "import", stderr)
	if !ok {
		return exitError
	}
	defer st.Close()
	var r io.Reader = os.Stdin
	if *in != "" {
		f, err := os.Open(*in)
		if err != nil {
			fmt.Fprintf(stderr, "agentstore import: %s\n", cliErr(err))
			return exitError
		}
		defer f.Close()
		r = f
	}
	pr := newProgress(stderr, "imported")
	rep, err := st.Import(ctx, r, agentstore.ImportParams{Progress: pr.update})
	pr.done()
	if err != nil {
		fmt.Fprintf(stderr, "agentstore import: %s\n", cliErr(err))
		fmt.Fprintf(stderr, "agentstore import: %s\n", importedSoFar(rep))
		return exitError
	}
	fmt.Fprintf(stdout, "imported %s; %s\n", summary(rep.Records, rep.Counts, rep.Checksum), importedSoFar(rep))
	return exitOK
}

// importedSoFar says what an import wrote and skipped.
func importedSoFar(rep agentstore.ImportReport) string {
	return fmt.Sprintf("sessions: %d imported, %d already stored; instances: %d imported, %d already stored",
		rep.SessionsImported, rep.SessionsSkipped, rep.InstancesImported, rep.InstancesSkipped)
}

func cmdCopy(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newFlags("copy", stderr, false)
	from := c.fs.String("from", "", "the source database's DSN")
	to := c.fs.String("to", "", "the target database's DSN (migrated first)")
	fromSchema := c.fs.String("from-schema", "", "the source's PostgreSQL schema")
	toSchema := c.fs.String("to-schema", "", "the target's PostgreSQL schema")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	if *from == "" || *to == "" {
		fmt.Fprintf(stderr, "agentstore copy: --from and --to are required\n%s", usage)
		return exitError
	}
	if c.schema != "" {
		fmt.Fprintf(stderr, "agentstore copy: use --from-schema and --to-schema\n")
		return exitError
	}
	src := &common{prefix: c.prefix, schema: *fromSchema, dsn: *from}
	dst := &common{prefix: c.prefix, schema: *toSchema, dsn: *to}
	in, ok := src.open(ctx, "copy", stderr, agentstore.WithReadOnly())
	if !ok {
		return exitError
	}
	defer in.Close()
	out, ok := dst.open(ctx, "copy", stderr)
	if !ok {
		return exitError
	}
	defer out.Close()
	if err := out.Migrate(ctx); err != nil {
		fmt.Fprintf(stderr, "agentstore copy: migrate the target: %s\n", cliErr(err))
		return exitError
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	var exErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, exErr = in.Export(ctx, pw, agentstore.ExportParams{})
		pw.CloseWithError(exErr)
	}()
	disp := newProgress(stderr, "copied")
	rep, err := out.Import(ctx, pr, agentstore.ImportParams{Progress: disp.update})
	disp.done()
	_ = pr.CloseWithError(errors.New("import ended"))
	cancel()
	wg.Wait()
	if exErr != nil && err != nil && !errors.Is(err, exErr) {
		fmt.Fprintf(stderr, "agentstore copy: export: %s\n", cliErr(exErr))
	}
	if err != nil {
		fmt.Fprintf(stderr, "agentstore copy: %s\n", cliErr(err))
		fmt.Fprintf(stderr, "agentstore copy: %s\n", importedSoFar(rep))
		return exitError
	}
	fmt.Fprintf(stdout, "copied %s; %s\n", summary(rep.Records, rep.Counts, rep.Checksum), importedSoFar(rep))
	return exitOK
}
