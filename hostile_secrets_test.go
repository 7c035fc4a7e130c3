package agentstore_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm/logger"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// captureLog is a GORM logger writer that keeps everything it is given.
type captureLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

// Printf implements logger.Writer.
func (c *captureLog) Printf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprintf(&c.buf, format+"\n", args...)
}

func (c *captureLog) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}

// secretDSNs returns DSN forms carrying pw, for host:port.
func secretDSNs(pw, hostPort string) map[string]string {
	host, port, _ := strings.Cut(hostPort, ":")
	return map[string]string{
		"userinfo":         "postgres://postgres:" + pw + "@" + hostPort + "/test?sslmode=disable&connect_timeout=2",
		"postgresql":       "postgresql://postgres:" + pw + "@" + hostPort + "/test?sslmode=disable&connect_timeout=2",
		"percent-encoded":  "postgres://postgres:" + url.QueryEscape(pw+"@/:") + "@" + hostPort + "/test?sslmode=disable&connect_timeout=2",
		"query param":      "postgres://postgres@" + hostPort + "/test?sslmode=disable&connect_timeout=2&password=" + pw,
		"sslpassword":      "postgres://postgres@" + hostPort + "/test?sslmode=disable&connect_timeout=2&sslpassword=" + pw,
		"key=value quoted": "host=" + host + " port=" + port + " user=postgres dbname=test sslmode=disable connect_timeout=2 password='" + pw + "' sslpassword=" + pw,
	}
}

// leaks reports whether s contains pw (raw or percent-encoded).
func leaks(s, pw string) bool {
	return strings.Contains(s, pw) || strings.Contains(s, url.QueryEscape(pw+"@/:"))
}

// TestHostileSecretsNeverInErrorsOrLogs: a PostgreSQL password in the DSN
// (userinfo, percent-encoded, password or sslpassword query parameter,
// key=value quoted) never appears in Open's
// errors (unreachable server, bad options, bad DSN), in RedactDSN, in a
// formatted Store, or in anything the GORM logger prints at Info level
// while migrating, working and failing against a reachable server.
func TestHostileSecretsNeverInErrorsOrLogs(t *testing.T) {
	t.Parallel()
	const pw = "Pw-d0nt-l3ak-9f3e"
	ctx := context.Background()
	tried, leaked := 0, 0
	check := func(what, s string) {
		t.Helper()
		tried++
		if leaks(s, pw) {
			leaked++
			t.Errorf("%s leaks the password: %s", what, s)
		}
	}
	// Unreachable server, invalid options, invalid DSN text.
	for form, dsn := range secretDSNs(pw, "127.0.0.1:1") {
		_, err := agentstore.Open(ctx, dsn)
		if err == nil {
			t.Fatalf("%s: Open of an unreachable server succeeded", form)
		}
		check(form+": unreachable Open error", err.Error())
		check(form+": unreachable Open error %+v", fmt.Sprintf("%+v %#v", err, err))
		_, err = agentstore.Open(ctx, dsn, agentstore.WithSchema(`bad"schema`))
		if err == nil {
			t.Fatalf("%s: Open with a bad schema succeeded", form)
		}
		check(form+": bad option error", err.Error())
		check(form+": RedactDSN", agentstore.RedactDSN(dsn))
		_, err = agentstore.Open(ctx, strings.NewReplacer("127.0.0.1:1", "127.0.0.1:notaport", "port=1 ", "port=notaport ").Replace(dsn))
		if err == nil {
			t.Fatalf("%s: Open with a bad port succeeded", form)
		}
		check(form+": bad port error", err.Error())
		other := strings.Replace(dsn, "postgres", "oracle", 1)
		if !strings.Contains(dsn, "://") {
			other = "driver=oracle " + dsn
		}
		_, _, err = agentstore.ParseDSN(other)
		if err == nil {
			t.Fatalf("%s: ParseDSN of an oracle DSN succeeded", form)
		}
		check(form+": unknown scheme error", err.Error())
	}
	for _, dsn := range []string{"host=127.0.0.1 port=1 password=" + pw, "postgres://postgres:" + pw + " with space@127.0.0.1:1/x", "postgres://postgres:" + pw + "@[::1"} {
		_, err := agentstore.Open(ctx, dsn)
		if err == nil {
			t.Fatalf("Open(%q) succeeded", agentstore.RedactDSN(dsn))
		}
		check("malformed DSN error", err.Error())
		check("malformed DSN RedactDSN", agentstore.RedactDSN(dsn))
	}

	// A reachable server (trust authentication ignores the password).
	requirePostgres(t)
	u, err := url.Parse(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	for form, dsn := range secretDSNs(pw, u.Host) {
		schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		var logs captureLog
		st, err := agentstore.Open(ctx, dsn, agentstore.WithSchema(schema),
			agentstore.WithLogger(logger.New(&logs, logger.Config{LogLevel: logger.Info})))
		if err != nil {
			t.Fatalf("%s: open: %v", form, err)
		}
		t.Cleanup(func() {
			_ = st.DB(context.Background()).Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`).Error
			_ = st.Close()
		})
		if err := st.Migrate(ctx); err != nil {
			t.Fatalf("%s: migrate: %v", form, err)
		}
		s := repo.NewSession()
		if err := st.Sessions().Save(ctx, s); err != nil {
			t.Fatal(err)
		}
		_, err = st.Sessions().Load(ctx, uuid.New())
		check(form+": not-found error", fmt.Sprint(err))
		err = st.DB(ctx).Exec("SELECT * FROM no_such_table").Error
		check(form+": SQL error", fmt.Sprint(err))
		if _, err := st.Verify(ctx); err != nil {
			check(form+": verify error", err.Error())
		}
		check(form+": formatted Store", fmt.Sprintf("%v %+v %#v", st, st, st))
		check(form+": formatted sql.DB stats", fmt.Sprintf("%+v", st.SQLDB().Stats()))
		cctx, cancel := context.WithTimeout(ctx, time.Nanosecond)
		_, err = st.Sessions().Load(cctx, s.ID)
		cancel()
		check(form+": timeout error", fmt.Sprint(err))
		if logs.String() == "" {
			t.Fatalf("%s: the Info logger captured nothing: the check would be vacuous", form)
		}
		check(form+": logger output", logs.String())
	}
	relLogf(t, "secrets: %d error/log/format outputs checked over %d DSN forms, outputs leaking the password %d", tried, len(secretDSNs(pw, ""))+3, leaked)
}

// TestHostileSecretsNeverInCLIOutput: the CLI's migrate and verify (text and
// --json), with the DSN given by flag or by AGENTSTORE_DSN, against a
// reachable and an unreachable server, never print the password.
func TestHostileSecretsNeverInCLIOutput(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	const pw = "Cl1-pw-n3ver-sh0wn"
	bin := buildCLI(t)
	u, err := url.Parse(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	schema := "t_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	t.Cleanup(func() {
		if db, err := adminDB(); err == nil {
			_, _ = db.Exec(`DROP SCHEMA IF EXISTS "` + schema + `" CASCADE`)
		}
	})
	runs, leaked := 0, 0
	for _, host := range []string{u.Host, "127.0.0.1:1"} {
		forms := secretDSNs(pw, host)
		forms["key=value"] = "host=" + strings.Split(host, ":")[0] + " port=" + strings.Split(host, ":")[1] + " password=" + pw
		for form, dsn := range forms {
			for _, args := range [][]string{
				{"migrate", "--schema", schema},
				{"verify", "--schema", schema},
				{"verify", "--schema", schema, "--json"},
				{"verify", "--schema", "bad;schema"},
			} {
				for _, viaEnv := range []bool{runs%2 == 0} {
					a := append([]string(nil), args...)
					cmd := exec.Command(bin, a...)
					if viaEnv {
						cmd.Env = append(os.Environ(), "AGENTSTORE_DSN="+dsn)
					} else {
						cmd.Args = append(cmd.Args, "--dsn", dsn)
						cmd.Env = append(os.Environ(), "AGENTSTORE_DSN=")
					}
					out, _ := cmd.CombinedOutput()
					runs++
					if len(out) == 0 && a[0] == "migrate" {
						t.Fatalf("%s %v: no output at all: the check would be vacuous", form, a)
					}
					if leaks(string(out), pw) {
						leaked++
						t.Errorf("agentstore %v (%s, env=%v, host %s) printed the password:\n%s", a, form, viaEnv, host, out)
					}
				}
			}
		}
	}
	relLogf(t, "secrets: %d CLI runs (migrate/verify/--json, flag and env DSN, reachable and unreachable server), runs leaking the password %d", runs, leaked)
}
