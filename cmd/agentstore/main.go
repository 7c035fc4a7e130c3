// Command agentstore exports, applies and checks the agentstore schema.
//
//	agentstore ddl --dialect postgres|sqlite [--prefix P] [--schema S]
//	agentstore ddl --dialect D --format flyway|goose|golang-migrate --dir DIR [--version-offset N]
//	agentstore ddl --dialect D --flyway DIR
//	agentstore migrate --dsn DSN [--prefix P] [--schema S]
//	agentstore verify --dsn DSN [--prefix P] [--schema S] [--json]
//	agentstore version
//
// ddl prints the whole migration chain (agentstore.DDL) to stdout, or
// writes it as one file per migration in a tool's layout
// (agentstore.ExportMigrations; --flyway DIR is --format flyway --dir DIR);
// it refuses to overwrite a file whose content differs. migrate runs
// Store.Migrate and prints the versions it moved the database from and to.
// verify opens the database read-only, runs Store.Verify and prints one
// issue per line (or the whole report as JSON with --json), or one "ok:"
// line.
//
// The DSN may come from the AGENTSTORE_DSN environment variable instead of
// --dsn.
//
// Exit status: 0 success (verify: no issues); 1 verify found issues, or
// migrate found the database's schema newer than this binary (nothing
// changed); 2 the command could not run (usage error, bad option,
// unreachable database, failed migration, a changed file in the way of
// ddl). Errors go to stderr; a DSN's password is never printed.
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
	"syscall"

	"github.com/agentstore/agentstore"
)

// Exit codes.
const (
	exitOK     = 0
	exitIssues = 1
	exitError  = 2
)

const usage = `usage:
  agentstore ddl --dialect postgres|sqlite [--prefix P] [--schema S]            # the whole chain, to stdout
  agentstore ddl --dialect D --format flyway|goose|golang-migrate --dir DIR [--version-offset N] [--prefix P] [--schema S]
  agentstore ddl --dialect D --flyway DIR                                       # = --format flyway --dir DIR
  agentstore migrate --dsn DSN [--prefix P] [--schema S]
  agentstore verify --dsn DSN [--prefix P] [--schema S] [--json]
  agentstore version

DSN: postgres://user:pass@host:5432/db?sslmode=disable, sqlite:PATH or sqlite::memory:
     (or set AGENTSTORE_DSN instead of --dsn, to keep a password off the command line)
exit status: 0 ok; 1 verify found issues, or the database's schema is newer than this binary;
             2 could not run (bad usage, unreachable database, a migration failed)
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
	case "migrate":
		return cmdMigrate(ctx, args[1:], stdout, stderr)
	case "verify":
		return cmdVerify(ctx, args[1:], stdout, stderr)
	case "version":
		if len(args) > 1 {
			fmt.Fprintf(stderr, "agentstore: version takes no arguments\n%s", usage)
			return exitError
		}
		fmt.Fprintf(stdout, "agentstore %s (schema version %d, %s)\n", moduleVersion(), agentstore.SchemaVersion, runtime.Version())
		return exitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "agentstore: unknown command %q\n%s", args[0], usage)
		return exitError
	}
}

func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
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
		c.fs.StringVar(&c.dsn, "dsn", "", "database DSN: postgres://..., sqlite:PATH (env AGENTSTORE_DSN)")
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
	dialect := c.fs.String("dialect", "", "postgres or sqlite (required)")
	flyway := c.fs.String("flyway", "", "write the chain for Flyway into DIR (same as --format flyway --dir DIR)")
	format := c.fs.String("format", "", "write the chain as files for flyway, goose or golang-migrate (needs --dir)")
	dir := c.fs.String("dir", "", "directory the --format files are written to")
	offset := c.fs.Int64("version-offset", 0, "add N to every file's version (to sit after an application's own migrations)")
	if code, done := c.parse(args, stderr); done {
		return code
	}
	d := agentstore.Dialect(*dialect)
	if d != agentstore.Postgres && d != agentstore.SQLite {
		fmt.Fprintf(stderr, "agentstore ddl: --dialect must be postgres or sqlite (got %q)\n", *dialect)
		return exitError
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
			fmt.Fprintf(stderr, "agentstore ddl: %v\n", err)
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
		fmt.Fprintf(stderr, "agentstore ddl: %v\n", err)
		return exitError
	}
	if _, err := io.WriteString(stdout, ddl); err != nil {
		fmt.Fprintf(stderr, "agentstore ddl: %v\n", err)
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
		fmt.Fprintf(stderr, "agentstore %s: %v\n", cmd, err)
		return nil, false
	}
	return st, true
}

func cmdMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newFlags("migrate", stderr, true)
	if code, done := c.parse(args, stderr); done {
		return code
	}
	st, ok := c.open(ctx, "migrate", stderr)
	if !ok {
		return exitError
	}
	defer st.Close()
	from, err := st.RecordedSchemaVersion(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "agentstore migrate: %v\n", err)
		return exitError
	}
	if err := st.Migrate(ctx); err != nil {
		fmt.Fprintf(stderr, "agentstore migrate: %v\n", err)
		var me *agentstore.MigrationError
		if errors.As(err, &me) && me.DatabaseMessage != "" {
			fmt.Fprintf(stderr, "database said: %s\n", me.DatabaseMessage)
		}
		if errors.Is(err, agentstore.ErrSchemaAhead) {
			return exitIssues
		}
		return exitError
	}
	fmt.Fprintf(stdout, "migrated %s from schema version %d to %d (prefix %q", agentstore.RedactDSN(c.dsn), from, agentstore.SchemaVersion, st.TablePrefix())
	if st.Schema() != "" {
		fmt.Fprintf(stdout, ", schema %q", st.Schema())
	}
	fmt.Fprintln(stdout, ")")
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
		fmt.Fprintf(stderr, "agentstore verify: %v\n", err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintf(stderr, "agentstore verify: %v\n", err)
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
