// Command bench measures agentstore against the raw-SQL limit and against
// the peers a user would pick instead (River, go-workflows, DBOS), in one
// process run, back to back, on the same database servers. It prints a
// Markdown table and, with -json, writes every figure (and every ratio) as
// a JSON array of {"scenario","dialect","subject","value","unit"} objects.
//
//	cd bench && go run . [-quick] [-pg DSN] [-json FILE]
//	cd bench && go run . -scale [-scale-max 1e5] [-dialects sqlite,postgres] [-json FILE]
//
// -scale measures instead how the cost of operations that should not
// depend on the data size moves with N = 1e3 … -scale-max rows (scale.go).
//
// Without -pg it uses AGENTSTORE_TEST_POSTGRES_DSN or the local default.
// SQLite files go in a temporary directory. MariaDB (go-workflows' MySQL
// backend) is reached at -mysql (default root@127.0.0.1:3306); the
// mariadb dialect (-dialects mariadb) at -mariadb, else
// AGENTSTORE_TEST_MARIADB_DSN, else mysql://root@127.0.0.1:3306/test,
// in databases of its own (agentstore_bench_*). A peer that
// cannot run is reported in the output ("not run"), never dropped silently.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/agentstore/agentstore"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// defaultPostgresDSN is the local test server (same default as the library tests).
const defaultPostgresDSN = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// Result is one measured figure or ratio.
type Result struct {
	Scenario string  `json:"scenario"`
	Dialect  string  `json:"dialect"`
	Subject  string  `json:"subject"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
}

// skip records a comparator or scenario that could not run, and why.
type skip struct {
	Scenario, Dialect, Subject, Reason string
}

// sizes are the workload sizes of one run.
type sizes struct {
	appendSmall, appendLarge int // messages already in the session
	appendOps                int // appends timed per size
	seedOps                  int // seed rewrites timed at appendLarge
	loadMessages, loadOps    int
	queueItems, queueWorkers int
	orchestrations           int
	parallelSessions         int
	parallelAppends          int // appends per session
	wakeupSamples            int
}

func fullSizes() sizes {
	return sizes{appendSmall: 10, appendLarge: 10000, appendOps: 200, seedOps: 3, loadMessages: 10000, loadOps: 10,
		queueItems: 20000, queueWorkers: 8, orchestrations: 1000, parallelSessions: 8, parallelAppends: 500, wakeupSamples: 200}
}

func quickSizes() sizes {
	return sizes{appendSmall: 10, appendLarge: 10000, appendOps: 40, seedOps: 1, loadMessages: 10000, loadOps: 3,
		queueItems: 1000, queueWorkers: 8, orchestrations: 100, parallelSessions: 8, parallelAppends: 40, wakeupSamples: 30}
}

// bench holds the configuration and the collected results of a run.
type bench struct {
	pgDSN    string
	mariaDSN string // the agentstore MariaDB subjects and raw baselines (mariadb.go)
	mysqlDSN string
	dir      string // SQLite files
	sz       sizes
	quick    bool
	rounds   int
	// orchLoops, orchWorkers: the agentstore orchestration's orchestrator
	// and worker loops (-orch-loops)
	orchLoops, orchWorkers int
	only                   map[string]bool
	dialects               []string
	results                []Result
	skips                  []skip
	log                    io.Writer
	// orchSpent is the CPU the last orchestration round spent (orch.go)
	orchSpent cpuSpan
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run() error {
	quick := flag.Bool("quick", false, "small sizes: the whole run finishes in under a minute")
	pg := flag.String("pg", "", "PostgreSQL DSN (default: $AGENTSTORE_TEST_POSTGRES_DSN or "+defaultPostgresDSN+")")
	jsonOut := flag.String("json", "", "write the results as a JSON array to this file")
	mysqlDSN := flag.String("mysql", "root@tcp(127.0.0.1:3306)/", "MariaDB/MySQL server for go-workflows' mysql backend (go-sql-driver DSN, no database)")
	scenarios := flag.String("scenarios", "", "comma-separated subset of append,load,queue,orchestration,append_parallel,wakeup (default: all)")
	dialects := flag.String("dialects", "sqlite,postgres,mariadb", "comma-separated subset of sqlite,postgres,mariadb (an unreachable server's rows are reported as skipped)")
	mariaDSN := flag.String("mariadb", "", "MariaDB DSN of the mariadb dialect (default: $AGENTSTORE_TEST_MARIADB_DSN or "+defaultMariaDBDSN+"); the bench creates and drops databases "+mariaPrefix+"*")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	queueItems := flag.Int("queue-items", 0, "override the queue scenario's item count")
	scale := flag.Bool("scale", false, "scale mode: measure the issue-15 operations at N = 1e3, 1e4, ... up to -scale-max rows and print the growth per decade (the other scenarios do not run)")
	scaleMax := flag.Float64("scale-max", 1e5, "largest N of -scale (1e6 takes several more minutes)")
	orchLoops := flag.String("orch-loops", "2+2", "the agentstore orchestration's orchestrator + worker loops")
	rounds := flag.Int("rounds", 0, "repetitions of each queue/orchestration comparison (queue: rate over all rounds; orchestration: median) (default 3, 1 with -quick)")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	b := &bench{pgDSN: *pg, mariaDSN: *mariaDSN, mysqlDSN: *mysqlDSN, sz: fullSizes(), quick: *quick, log: os.Stderr}
	if b.mariaDSN == "" {
		b.mariaDSN = os.Getenv("AGENTSTORE_TEST_MARIADB_DSN")
	}
	if b.mariaDSN == "" {
		b.mariaDSN = defaultMariaDBDSN
	}
	if b.pgDSN == "" {
		b.pgDSN = os.Getenv("AGENTSTORE_TEST_POSTGRES_DSN")
	}
	if b.pgDSN == "" {
		b.pgDSN = defaultPostgresDSN
	}
	if *quick {
		b.sz = quickSizes()
	}
	if *queueItems > 0 {
		b.sz.queueItems = *queueItems
	}
	switch {
	case *rounds > 0:
		b.rounds = *rounds
	case *quick:
		b.rounds = 1
	default:
		b.rounds = 3
	}
	if o, w, ok := strings.Cut(*orchLoops, "+"); ok {
		b.orchLoops, _ = strconv.Atoi(o)
		b.orchWorkers, _ = strconv.Atoi(w)
	}
	if b.orchLoops < 1 || b.orchWorkers < 1 {
		fmt.Fprintf(os.Stderr, "-orch-loops %q: want N+M, both at least 1\n", *orchLoops)
		os.Exit(2)
	}
	if *scenarios != "" {
		b.only = map[string]bool{}
		for _, s := range strings.Split(*scenarios, ",") {
			b.only[strings.TrimSpace(s)] = true
		}
	}
	for _, d := range strings.Split(*dialects, ",") {
		if d = strings.TrimSpace(d); d == "sqlite" || d == "postgres" || d == "mariadb" {
			b.dialects = append(b.dialects, d)
		} else if d != "" {
			return fmt.Errorf("unknown dialect %q", d)
		}
	}
	dir, err := os.MkdirTemp("", "agentstore-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b.dir = dir

	ctx := context.Background()
	if *scale {
		if err := b.runScale(ctx, *scaleMax, os.Stdout); err != nil {
			return err
		}
		return b.writeJSON(*jsonOut)
	}
	start := time.Now()
	b.logf("agentstore bench: quick=%v, %s, %d CPUs, PostgreSQL %s, MariaDB %s", *quick, runtime.Version(), runtime.NumCPU(), redact(b.pgDSN), redact(b.mariaDSN))
	type scenario struct {
		name string
		fn   func(context.Context, string)
	}
	all := []scenario{
		{"append", b.benchAppend},
		{"load", b.benchLoad},
		{"queue", b.benchQueue},
		{"orchestration", b.benchOrchestration},
		{"append_parallel", b.benchAppendParallel},
		{"wakeup", b.benchWakeup},
	}
	for _, sc := range all {
		if b.only != nil && !b.only[sc.name] {
			continue
		}
		for _, d := range b.dialects {
			t0 := time.Now()
			b.logf("== %s / %s", sc.name, d)
			sc.fn(ctx, d)
			b.logf("   %s / %s took %v", sc.name, d, time.Since(t0).Round(time.Millisecond))
		}
	}
	b.logf("total %v", time.Since(start).Round(time.Millisecond))

	b.printMarkdown(os.Stdout, time.Since(start))
	return b.writeJSON(*jsonOut)
}

// writeJSON writes the results as a JSON array to path ("" = not at all).
func (b *bench) writeJSON(path string) error {
	if path == "" {
		return nil
	}
	out := b.results
	if out == nil {
		out = []Result{}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, format+"\n", args...)
}

// add records a figure.
func (b *bench) add(scenario, dialect, subject string, value float64, unit string) {
	b.results = append(b.results, Result{Scenario: scenario, Dialect: dialect, Subject: subject, Value: round(value), Unit: unit})
	b.logf("   %-16s %-8s %-58s %12.3f %s", scenario, dialect, subject, value, unit)
}

// ratio records num/den as a ratio (skipped, and said so, when either is missing).
func (b *bench) ratio(scenario, dialect, subject string, num, den float64) {
	if num <= 0 || den <= 0 || math.IsNaN(num) || math.IsNaN(den) {
		b.skipf(scenario, dialect, subject, "an operand was not measured")
		return
	}
	b.add(scenario, dialect, subject, num/den, "ratio")
}

// skipf records a comparator that could not be measured.
func (b *bench) skipf(scenario, dialect, subject, format string, args ...any) {
	reason := fmt.Sprintf(format, args...)
	b.skips = append(b.skips, skip{scenario, dialect, subject, reason})
	b.logf("   NOT RUN %s %s %s: %s", scenario, dialect, subject, reason)
}

// guard runs fn, turning a panic (several peers panic on setup errors) into an error.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, firstLines(string(debug.Stack()), 12))
		}
	}()
	return fn()
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

func round(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	mag := math.Pow(10, 4-math.Ceil(math.Log10(math.Abs(v))))
	return math.Round(v*mag) / mag
}

func median(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func percentile(xs []time.Duration, p float64) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// redact hides the password of dsn in any DSN form agentstore accepts
// (URL forms and go-sql-driver's user:pw@tcp(...)/db).
func redact(dsn string) string { return agentstore.RedactDSN(dsn) }

// printMarkdown writes the results table, the ratio table and what did not run.
func (b *bench) printMarkdown(w io.Writer, took time.Duration) {
	mode := "full"
	if b.quick {
		mode = "quick"
	}
	fmt.Fprintf(w, "# agentstore bench (%s run, %s, %d CPUs, took %v)\n\n", mode, runtime.Version(), runtime.NumCPU(), took.Round(time.Second))
	fmt.Fprintln(w, "| scenario | dialect | subject | value | unit |")
	fmt.Fprintln(w, "|---|---|---|---:|---|")
	for _, r := range b.results {
		if r.Unit != "ratio" {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.Scenario, r.Dialect, r.Subject, fmtValue(r.Value), r.Unit)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| ratio | dialect | value | target | met |")
	fmt.Fprintln(w, "|---|---|---:|---|---|")
	for _, r := range b.results {
		if r.Unit == "ratio" {
			target, met := targetFor(r.Dialect, r.Subject, r.Value)
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", r.Subject, r.Dialect, fmtValue(r.Value), target, met)
		}
	}
	if len(b.skips) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "Not run (comparator could not be built, started or measured here):")
		fmt.Fprintln(w)
		for _, s := range b.skips {
			fmt.Fprintf(w, "- %s / %s / %s: %s\n", s.Scenario, s.Dialect, s.Subject, strings.ReplaceAll(firstLines(s.Reason, 3), "\n", " "))
		}
	}
}

func fmtValue(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// targetFor returns the target for a ratio of dialect and whether v
// meets it.
func targetFor(dialect, subject string, v float64) (string, string) {
	name, _, _ := strings.Cut(subject, "/")
	var ok bool
	var t string
	switch {
	case name == "append_flatness":
		t, ok = "≤ 1.3", v <= 1.3
	case name == "append_vs_seed":
		t, ok = "≥ 50", v >= 50
	case name == "append_parallel_vs_raw":
		t, ok = "≥ 0.9", v >= 0.9
	case name == "scale_growth":
		t, ok = "≤ 1.3", v <= 1.3
	case name == "load_vs_raw":
		t, ok = "≤ 1.5", v <= 1.5
	case name == "queue_vs_raw" && dialect == "mariadb": // issue 26: ≥ 0.8 the raw baseline on the same driver
		t, ok = "≥ 0.8", v >= 0.8
	case name == "queue_vs_raw": // issue 15: ≥ 1.0 the per-item raw baseline
		t, ok = "≥ 1.0", v >= 1.0
	case name == "queue_vs_river": // issue 15: ≥ 1.3 River (tuned) at 8 workers
		t, ok = "≥ 1.3", v >= 1.3
	case strings.HasPrefix(name, "orchestration_vs_goworkflows"):
		t, ok = "≥ 2", v >= 2
	case strings.HasPrefix(name, "orchestration_vs_dbos"): // issue 24: ≥ 1.5 at the same concurrency
		t, ok = "≥ 1.5", v >= 1.5
	default:
		return "—", "—"
	}
	if ok {
		return t, "yes"
	}
	return t, "**no**"
}

// medianOf runs measure b.rounds times and returns the median of the
// successful values (an error only if every round failed).
func (b *bench) medianOf(measure func() (float64, error)) (float64, error) {
	var vals []float64
	var lastErr error
	for range b.rounds {
		v, err := measure()
		if err != nil {
			lastErr = err
			continue
		}
		vals = append(vals, v)
	}
	if len(vals) == 0 {
		return 0, lastErr
	}
	slices.Sort(vals)
	return vals[len(vals)/2], nil
}
