// Command agentstore exports, applies and checks the agentstore schema.
//
//	agentstore ddl --dialect postgres|sqlite [--prefix P] [--schema S]
//	agentstore ddl --dialect D --format flyway|goose|golang-migrate --dir DIR [--version-offset N]
//	agentstore ddl --dialect D --flyway DIR
//	agentstore ddl --dialect postgres --citus[=schema|rows] [--schema S] [--prefix P]
//	agentstore status --dsn DSN [--prefix P] [--schema S] [--json]
//	agentstore migrate --dsn DSN [--prefix P] [--schema S] [--target N] [--dry-run]
//	agentstore verify --dsn DSN [--prefix P] [--schema S] [--json]
//	agentstore export --dsn DSN [--prefix P] [--schema S] [--tenant T | --session ID,...] [-o FILE]
//	agentstore import --dsn DSN [--prefix P] [--schema S] [-i FILE]
//	agentstore copy --from DSN --to DSN [--prefix P] [--from-schema S] [--to-schema S]
//	agentstore version (or --version)
//	agentstore help (or -h, --help)
//
// ddl prints the whole migration chain (agentstore.DDL) to stdout, or
// writes it as one file per migration in a tool's layout
// (agentstore.ExportMigrations; --flyway DIR is --format flyway --dir DIR);
// it refuses to overwrite a file whose content differs; with --citus it
// prints the Citus distribution statements instead (agentstore.CitusDDL:
// --citus or --citus=schema distributes the --schema schema,
// --citus=rows distributes each table by its column and is refused, exit
// 2, while the schema's keys lack the distribution column). status opens the
// database read-only and prints the versions it records and the versions
// of this build's chain it lacks (Store.MigrationStatus), one per line, or
// as JSON with --json. migrate runs Store.MigrateTo up to --target (default:
// this build's head), prints each version recorded during the run and the
// versions it moved the database from and to; with --dry-run it opens the
// database read-only and prints the statements it would run
// (Store.MigrationPlan) without running them. verify opens the database
// read-only, runs Store.Verify and prints one issue per line (or the whole
// report as JSON with --json), or one "ok:" line. version prints the module
// version (agentstore.Version), the schema head of each dialect and the Go
// version. export writes the selected sessions (and, without --tenant or
// --session, every provider instance) as an export stream
// (Store.Export, docs/export.md) to stdout or -o FILE; import reads one
// from stdin or -i FILE into a migrated database (Store.Import); copy
// migrates the target and streams the whole source into it (export piped
// into import, nothing on disk). The three show a progress line on stderr
// when stderr is a terminal.
//
// The DSN may come from the AGENTSTORE_DSN environment variable instead of
// --dsn.
//
// Exit status: 0 success (verify: no issues; status: the database is at
// this build's head); 1 verify found issues, or migrate found the
// database's schema newer than this binary or than --target (nothing
// changed); 2 the command could not run (usage error, bad option, a
// --target beyond this build's head, unreachable database, failed
// migration, a changed file in the way of ddl); 3 status: the database is
// behind this build (migrations pending); 4 status: the database is ahead
// of this build (a newer release migrated it). Errors go to stderr; a
// DSN's password is never printed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/migrations"
)

// Exit codes.
const (
	exitOK     = 0
	exitIssues = 1 // verify found issues; migrate: the database is ahead (nothing changed)
	exitError  = 2 // the command could not run
	exitBehind = 3 // status: migrations pending
	exitAhead  = 4 // status: the database is newer than this build
)

const usage = `agentstore exports, applies and checks the agentstore schema (SQLite and PostgreSQL).

usage:
  agentstore ddl --dialect postgres|sqlite [--prefix P] [--schema S]        the whole chain, to stdout
  agentstore ddl --dialect D --format flyway|goose|golang-migrate --dir DIR [--version-offset N] [--prefix P] [--schema S]
  agentstore ddl --dialect D --flyway DIR [--version-offset N]              = --format flyway --dir DIR
  agentstore ddl --dialect postgres --citus[=schema|rows] [--schema S] [--prefix P]   Citus distribution statements
  agentstore status  --dsn DSN [--prefix P] [--schema S] [--json]           applied and pending versions
  agentstore migrate --dsn DSN [--prefix P] [--schema S] [--target N] [--dry-run]
  agentstore verify  --dsn DSN [--prefix P] [--schema S] [--json]           compare the database with the models
  agentstore export  --dsn DSN [--tenant T | --session ID,...] [-o FILE]    sessions and instances as a stream
  agentstore import  --dsn DSN [-i FILE]                                    read a stream into a migrated database
  agentstore copy    --from DSN --to DSN [--from-schema S] [--to-schema S]  migrate the target, stream the source in
  agentstore version                                                        also --version
  agentstore help                                                           also -h, --help; "agentstore CMD -h" lists CMD's flags

flags:
  --dialect D         ddl: postgres, sqlite or mariadb (required)
  --format F          ddl: write one file per migration for flyway, goose or golang-migrate (needs --dir)
  --dir DIR           ddl: the directory --format writes to
  --flyway DIR        ddl: --format flyway --dir DIR
  --version-offset N  ddl: add N to every file's version (to sit after an application's own migrations)
  --citus             ddl: print the Citus distribution statements instead of the chain (= --citus=schema:
                      needs --schema); --citus=rows: per-table distribution (refused while the schema's keys
                      lack the distribution column)
  --dsn DSN           status, migrate, verify, export, import: postgres://user:pass@host:5432/db?sslmode=disable,
                      host=h user=u dbname=d, sqlite:PATH or sqlite::memory: (or set AGENTSTORE_DSN
                      instead, to keep a password off the command line)
  --prefix P          table prefix (default agentstore_)
  --schema S          PostgreSQL schema (default: the connection's current schema)
  --target N          migrate: apply the migrations up to version N only (default: this build's head)
  --dry-run           migrate: print the statements it would run, run nothing (opens read-only)
  --json              status, verify: print the result as JSON
  --tenant T          export: only the sessions of tenant T (no provider instances)
  --session IDS       export: only these sessions, comma-separated (no provider instances)
  -o FILE             export: write the stream to FILE (default stdout; removed if the export fails)
  -i FILE             import: read the stream from FILE (default stdin)
  --from DSN          copy: the source database
  --to DSN            copy: the target database (migrated first)
  --from-schema S     copy: the source's PostgreSQL schema (copy refuses --schema)
  --to-schema S       copy: the target's PostgreSQL schema

exit status:
  0  success; status: the database is at this build's head
  1  verify found issues; migrate: the database's schema is newer than this binary or --target (nothing changed)
  2  could not run: bad usage, --target beyond this build's head, unreachable database, a failed migration,
     a failed export, import or copy (import: what was imported before the bad line stays, whole sessions)
  3  status: the database is behind this build (migrations pending)
  4  status: the database is ahead of this build (a newer release migrated it)
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the exit status. It never panics.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "agentstore: internal error: %v\n", r)
			code = exitError
		}
	}()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitError
	}
	switch args[0] {
	case "ddl":
		return cmdDDL(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(ctx, args[1:], stdout, stderr)
	case "migrate":
		return cmdMigrate(ctx, args[1:], stdout, stderr)
	case "verify":
		return cmdVerify(ctx, args[1:], stdout, stderr)
	case "export":
		return cmdExport(ctx, args[1:], stdout, stderr)
	case "import":
		return cmdImport(ctx, args[1:], stdout, stderr)
	case "copy":
		return cmdCopy(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "agentstore: version takes no arguments\n%s", usage)
			return exitError
		}
		fmt.Fprintln(stdout, versionLine())
		return exitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "agentstore: unknown command %q\n%s", args[0], usage)
		return exitError
	}
}

// versionLine is what `agentstore version` prints: the module version
// (the build's module version too when it is a tagged or pseudo-version
// other than v+agentstore.Version), the schema head of each dialect and
// the Go version.
func versionLine() string {
	var b strings.Builder
	fmt.Fprintf(&b, "agentstore %s", agentstore.Version)
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" && bi.Main.Version != "v"+agentstore.Version {
		fmt.Fprintf(&b, " (module %s)", bi.Main.Version)
	}
	b.WriteString(" (schema head:")
	for i, d := range []agentstore.Dialect{agentstore.Postgres, agentstore.SQLite, agentstore.MariaDB} {
		if i > 0 {
			b.WriteByte(',')
		}
		if h, err := migrations.Head(string(d)); err == nil {
			fmt.Fprintf(&b, " %s V%d", d, h)
		} else {
			fmt.Fprintf(&b, " %s unknown", d)
		}
	}
	fmt.Fprintf(&b, "; %s)", runtime.Version())
	return b.String()
}

// common holds the flags shared by the commands.
type common struct {
	fs     *flag.FlagSet
	prefix string
	schema string
	dsn    string
}

func newFlags(name string, stderr io.Writer, withDSN bool) *common {
	c := &common{fs: flag.NewFlagSet("agentstore "+name, flag.ContinueOnError)}
	c.fs.SetOutput(stderr)
	c.fs.StringVar(&c.prefix, "prefix", agentstore.DefaultTablePrefix, "table prefix")
	c.fs.StringVar(&c.schema, "schema", "", "PostgreSQL schema (default: the connection's current schema)")
	if withDSN {
		c.fs.StringVar(&c.dsn, "dsn", "", "database DSN: postgres://..., sqlite:PATH, mysql://... or mariadb://... (env AGENTSTORE_DSN)")
	}
	return c
}

// parse parses args. It returns done=true with the exit status when the
// command must stop: -h (status 0, flags printed) or a usage error (status
// 2, printed with the reason).
func (c *common) parse(args []string, stderr io.Writer) (code int, done bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitError, true // the flag package printed the error and the flags
	}
	if c.fs.NArg() > 0 {
		fmt.Fprintf(stderr, "agentstore: unexpected argument %q\n%s", c.fs.Arg(0), usage)
		return exitError, true
	}
	return 0, false
}

func (c *common) options() []agentstore.Option {
	opts := []agentstore.Option{agentstore.WithTablePrefix(c.prefix)}
	if c.schema != "" {
		opts = append(opts, agentstore.WithSchema(c.schema))
	}
	return opts
}

func cmdDDL(args []string, stdout, stderr io.Writer) int {
	c := newFlags("ddl", stderr, false)
	dialect := c.fs.String("dialect", "", "postgres, sqlite or mariadb (required)")
	flyway := c.fs.String("flyway", "", "write the chain for Flyway into DIR (same as --format flyway --dir DIR)")
	format := c.fs.String("format", "", "write the chain as files for flyway, goose or golang-migrate (needs --dir)")
	dir := c.fs.String("dir", "", "directory the --format files are written to")
	offset := c.fs.Int64("version-offset", 0, "add N to every file's version (to sit after an application's own migrations)")
	var citus citusFlag
	c.fs.Var(&citus, "citus", "print the Citus distribution statements: schema (default) or rows")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	d := agentstore.Dialect(*dialect)
	if d != agentstore.Postgres && d != agentstore.SQLite && d != agentstore.MariaDB {
		fmt.Fprintf(stderr, "agentstore ddl: --dialect must be postgres, sqlite or mariadb (got %q)\n", *dialect)
		return exitError
	}
	if citus.set {
		return citusDDL(d, citus.mode, *flyway != "" || *format != "" || *dir != "" || *offset != 0, c, stdout, stderr)
	}
	if *flyway != "" {
		if *format != "" && *format != string(agentstore.FormatFlyway) || *dir != "" && *dir != *flyway {
			fmt.Fprintf(stderr, "agentstore ddl: --flyway DIR is --format flyway --dir DIR; do not combine it with another format or dir\n")
			return exitError
		}
		*format, *dir = string(agentstore.FormatFlyway), *flyway
	}
	if *format != "" || *dir != "" {
		if *format == "" || *dir == "" {
			fmt.Fprintf(stderr, "agentstore ddl: --format and --dir go together\n")
			return exitError
		}
		paths, err := agentstore.ExportMigrations(*dir, d, agentstore.ExportConfig{Format: agentstore.MigrationFormat(*format), VersionOffset: *offset}, c.options()...)
		for _, p := range paths {
			fmt.Fprintf(stderr, "wrote %s\n", p)
		}
		if err != nil {
			fmt.Fprintf(stderr, "agentstore ddl: %s\n", cliErr(err))
			return exitError
		}
		return exitOK
	}
	if *offset != 0 {
		fmt.Fprintf(stderr, "agentstore ddl: --version-offset needs --format and --dir\n")
		return exitError
	}
	ddl, err := agentstore.DDL(d, c.options()...)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore ddl: %s\n", cliErr(err))
		return exitError
	}
	if _, err := io.WriteString(stdout, ddl); err != nil {
		fmt.Fprintf(stderr, "agentstore ddl: %s\n", cliErr(err))
		return exitError
	}
	return exitOK
}

// citusFlag is --citus[=schema|rows]: a bare --citus is schema.
type citusFlag struct {
	set  bool
	mode agentstore.CitusMode
}

func (f *citusFlag) String() string { return string(f.mode) }

// IsBoolFlag lets --citus stand alone (flag passes "true").
func (f *citusFlag) IsBoolFlag() bool { return true }

func (f *citusFlag) Set(v string) error {
	switch v {
	case "true", string(agentstore.CitusSchemaMode):
		f.mode = agentstore.CitusSchemaMode
	case string(agentstore.CitusRowsMode):
		f.mode = agentstore.CitusRowsMode
	default:
		return fmt.Errorf("want --citus, --citus=schema or --citus=rows")
	}
	f.set = true
	return nil
}

// citusDDL prints agentstore.CitusDDL(mode) for ddl --citus.
func citusDDL(d agentstore.Dialect, mode agentstore.CitusMode, files bool, c *common, stdout, stderr io.Writer) int {
	if d != agentstore.Postgres {
		fmt.Fprintf(stderr, "agentstore ddl: --citus needs --dialect postgres (Citus is a PostgreSQL extension)\n")
		return exitError
	}
	if files {
		fmt.Fprintf(stderr, "agentstore ddl: --citus prints to stdout; do not combine it with --format, --dir, --flyway or --version-offset\n")
		return exitError
	}
	out, err := agentstore.CitusDDL(mode, c.options()...)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore ddl: %s\n", cliErr(err))
		return exitError
	}
	if _, err := io.WriteString(stdout, out); err != nil {
		fmt.Fprintf(stderr, "agentstore ddl: %s\n", cliErr(err))
		return exitError
	}
	return exitOK
}

// open parses the DSN flags and opens the store; it prints why on failure.
func (c *common) open(ctx context.Context, cmd string, stderr io.Writer, extra ...agentstore.Option) (*agentstore.Store, bool) {
	if c.dsn == "" {
		c.dsn = os.Getenv("AGENTSTORE_DSN")
	}
	if c.dsn == "" {
		fmt.Fprintf(stderr, "agentstore %s: --dsn is required\n%s", cmd, usage)
		return nil, false
	}
	st, err := agentstore.Open(ctx, c.dsn, append(c.options(), extra...)...)
	if err != nil {
		// Open's errors name the (redacted) target once and never contain the password.
		fmt.Fprintf(stderr, "agentstore %s: %s\n", cmd, cliErr(err))
		return nil, false
	}
	return st, true
}

func cmdStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newFlags("status", stderr, true)
	asJSON := c.fs.Bool("json", false, "print the status as JSON")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	st, ok := c.open(ctx, "status", stderr, agentstore.WithReadOnly())
	if !ok {
		return exitError
	}
	defer st.Close()
	ms, err := st.MigrationStatus(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore status: %s\n", cliErr(err))
		return exitError
	}
	state, code := "current", exitOK
	switch {
	case ms.Ahead():
		state, code = "ahead", exitAhead
	case ms.Behind():
		state, code = "behind", exitBehind
	}
	// Like verify's issues, a non-zero status is also said on stderr.
	say := func() int {
		switch state {
		case "ahead":
			fmt.Fprintf(stderr, "agentstore status: the database is ahead of this build (version %d > head %d)\n", ms.Current, ms.Head)
		case "behind":
			fmt.Fprintf(stderr, "agentstore status: %d migration(s) pending\n", len(ms.Pending))
		}
		return code
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			*agentstore.MigrationStatus
			State string `json:"state"`
		}{ms, state}); err != nil {
			fmt.Fprintf(stderr, "agentstore status: %s\n", cliErr(err))
			return exitError
		}
		return say()
	}
	for _, a := range ms.Applied {
		desc := a.Description
		if desc == "" {
			desc = "(unknown to this build)"
		}
		fmt.Fprintf(stdout, "V%-3d applied  %s  %s\n", a.Version, a.AppliedAt.Format("2006-01-02 15:04:05Z"), desc)
	}
	for _, p := range ms.Pending {
		fmt.Fprintf(stdout, "V%-3d pending  %-20s  %s\n", p.Version, "", p.Description)
	}
	switch state {
	case "ahead":
		fmt.Fprintf(stdout, "ahead: the database records schema version %d, newer than this build's head %d (upgrade agentstore)\n", ms.Current, ms.Head)
	case "behind":
		fmt.Fprintf(stdout, "behind: schema version %d, this build's head is %d (%d pending; run agentstore migrate)\n", ms.Current, ms.Head, len(ms.Pending))
	default:
		fmt.Fprintf(stdout, "current: schema version %d, this build's head\n", ms.Current)
	}
	return say()
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newFlags("migrate", stderr, true)
	target := c.fs.Int64("target", agentstore.SchemaVersion, "apply the migrations up to version N only (default: this build's head)")
	dryRun := c.fs.Bool("dry-run", false, "print the statements migrate would run, run nothing (opens the database read-only)")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	if *target < 1 || *target > agentstore.SchemaVersion {
		fmt.Fprintf(stderr, "agentstore migrate: --target %d is not a version of this build's chain: it goes from 1 to its head %d (a newer agentstore applies later versions)\n",
			*target, agentstore.SchemaVersion)
		return exitError
	}
	var extra []agentstore.Option
	if *dryRun {
		extra = append(extra, agentstore.WithReadOnly())
	}
	st, ok := c.open(ctx, "migrate", stderr, extra...)
	if !ok {
		return exitError
	}
	defer st.Close()
	before, err := st.MigrationStatus(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore migrate: %s\n", cliErr(err))
		return exitError
	}
	if before.Current > *target && !before.Ahead() {
		fmt.Fprintf(stderr, "agentstore migrate: the database is at schema version %d, above --target %d: migrations are forward-only, nothing changed\n",
			before.Current, *target)
		return exitIssues
	}
	if *dryRun {
		return migrateDryRun(ctx, st, c.dsn, *target, before, stdout, stderr)
	}
	if err := st.MigrateTo(ctx, *target); err != nil {
		fmt.Fprintf(stderr, "agentstore migrate: %s\n", cliErr(err))
		var me *agentstore.MigrationError
		if errors.As(err, &me) && me.DatabaseMessage != "" {
			fmt.Fprintf(stderr, "database said: %s\n", me.DatabaseMessage)
		}
		if errors.Is(err, agentstore.ErrSchemaAhead) {
			return exitIssues
		}
		return exitError
	}
	after, err := st.MigrationStatus(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore migrate: %s\n", cliErr(err))
		return exitError
	}
	for _, a := range after.Applied {
		if !slices.ContainsFunc(before.Applied, func(b agentstore.MigrationStep) bool { return b.Version == a.Version }) {
			fmt.Fprintf(stdout, "applied V%d %s\n", a.Version, a.Description)
		}
	}
	fmt.Fprintf(stdout, "migrated %s from schema version %d to %d (prefix %q", agentstore.RedactDSN(c.dsn), before.Current, after.Current, st.TablePrefix())
	if st.Schema() != "" {
		fmt.Fprintf(stdout, ", schema %q", st.Schema())
	}
	fmt.Fprintln(stdout, ")")
	return exitOK
}

// migrateDryRun prints, as an SQL script of comments and statements, what
// migrate would run up to target.
func migrateDryRun(ctx context.Context, st *agentstore.Store, dsn string, target int64, before *agentstore.MigrationStatus, stdout, stderr io.Writer) int {
	plan, err := st.MigrationPlan(ctx, target)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore migrate: %s\n", cliErr(err))
		if errors.Is(err, agentstore.ErrSchemaAhead) {
			return exitIssues
		}
		return exitError
	}
	fmt.Fprintf(stdout, "-- agentstore migrate --dry-run: %s (prefix %q", agentstore.RedactDSN(dsn), st.TablePrefix())
	if st.Schema() != "" {
		fmt.Fprintf(stdout, ", schema %q", st.Schema())
	}
	fmt.Fprintf(stdout, "), schema version %d, target %d. Nothing was run.\n", before.Current, target)
	if len(plan) == 0 {
		fmt.Fprintf(stdout, "-- nothing to do\n")
		return exitOK
	}
	for _, p := range plan {
		how := "in one transaction"
		if p.NoTransaction {
			how = "outside a transaction, statement by statement"
		}
		if p.Version > 0 {
			fmt.Fprintf(stdout, "\n-- V%d %s (%s)\n", p.Version, p.Description, how)
		} else {
			fmt.Fprintf(stdout, "\n-- %s (%s)\n", p.Description, how)
		}
		for _, s := range p.Statements {
			fmt.Fprintf(stdout, "%s;\n", s)
		}
	}
	return exitOK
}

func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newFlags("verify", stderr, true)
	asJSON := c.fs.Bool("json", false, "print the report as JSON")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	st, ok := c.open(ctx, "verify", stderr, agentstore.WithReadOnly())
	if !ok {
		return exitError
	}
	defer st.Close()
	rep, err := st.Verify(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore verify: %s\n", cliErr(err))
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "agentstore verify: %s\n", cliErr(err))
			return exitError
		}
	} else {
		for _, is := range rep.Issues {
			fmt.Fprintln(stdout, is.String())
		}
		if rep.OK() {
			fmt.Fprintf(stdout, "ok: %s schema version %d, %d tables match the models\n", rep.Dialect, rep.DatabaseVersion, rep.Tables)
		}
	}
	if !rep.OK() {
		fmt.Fprintf(stderr, "agentstore verify: %d schema issue(s)\n", len(rep.Issues))
		return exitIssues
	}
	return exitOK
}

// cliErr is err's text without the library's "agentstore: " prefixes (the
// sentinels carry one, and wrapped errors repeat it mid-line): the CLI
// already starts each line with "agentstore <command>: ".
func cliErr(err error) string {
	return strings.ReplaceAll(err.Error(), "agentstore: ", "")
}
