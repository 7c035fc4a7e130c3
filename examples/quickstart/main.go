// Command quickstart opens an embedded SQLite store (or PostgreSQL with
// --dsn), creates the schema, checks it, and prints what it did.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentstore/agentstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "agentstore-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dsn := flag.String("dsn", "sqlite:"+filepath.Join(dir, "agent.db"), "agentstore DSN (sqlite:PATH or postgres://...)")
	flag.Parse()

	ctx := context.Background()
	st, err := agentstore.Open(ctx, *dsn)
	if err != nil {
		return err
	}
	defer st.Close()
	fmt.Printf("opened %s store at %s\n", st.Dialect(), agentstore.RedactDSN(*dsn))
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	fmt.Printf("migrated to schema version %d (tables prefixed %q)\n", agentstore.SchemaVersion, st.TablePrefix())
	rep, err := st.Verify(ctx)
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("schema verification found %d issue(s):\n%s", len(rep.Issues), rep)
	}
	fmt.Printf("verified %d tables: schema matches the models (version %d)\n", rep.Tables, rep.DatabaseVersion)
	return nil
}
