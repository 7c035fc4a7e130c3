package agentstore_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// TestOpen_KeyValueDSN: a libpq key=value DSN (GORM's form) opens
// PostgreSQL, and ParseDSN names the dialect.
func TestOpen_KeyValueDSN(t *testing.T) {
	t.Parallel()
	requirePostgres(t)
	u, err := url.Parse(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	kv := "host=" + u.Hostname() + " port=" + u.Port() + " user=" + u.User.Username() + " dbname=" + strings.TrimPrefix(u.Path, "/") + " sslmode=disable"
	if d, _, err := agentstore.ParseDSN(kv); err != nil || d != agentstore.Postgres {
		t.Fatalf("ParseDSN(%q) = %v, %v", kv, d, err)
	}
	st, err := agentstore.Open(context.Background(), kv)
	if err != nil {
		t.Fatalf("Open(%q): %v", kv, err)
	}
	defer st.Close()
	if err := st.SQLDB().PingContext(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestOpen_ErrorNamesDSNOnce: a connection failure names the redacted
// target once, never the password, and is retryable (the server's
// failure); a call ended by the caller's own deadline is not.
func TestOpen_ErrorNamesDSNOnce(t *testing.T) {
	t.Parallel()
	const pw = "Sup3r-s3cret-pw"
	dsn := "postgres://agent:" + pw + "@127.0.0.1:1/none?sslmode=disable&connect_timeout=1"
	_, err := agentstore.Open(context.Background(), dsn)
	if err == nil {
		t.Fatal("Open of an unreachable server succeeded")
	}
	if strings.Contains(err.Error(), pw) || strings.Count(err.Error(), "127.0.0.1:1/none") != 1 {
		t.Fatalf("error must name the redacted DSN once: %v", err)
	}
	if !agentstore.IsRetryable(err) {
		t.Fatalf("a refused connection is not retryable: %v", err)
	}
	forEachDialect(t, func(t *testing.T, h *harness) {
		st := h.New(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
		defer cancel()
		<-ctx.Done()
		_, err := st.Sessions().List(ctx, repoListAll())
		if err == nil || agentstore.IsRetryable(err) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call past the caller's deadline = %v, want context.DeadlineExceeded, not retryable", err)
		}
	})
}

func repoListAll() repo.ListParams { return repo.ListParams{} }

// TestRedactDSN: every secret a DSN can carry — the URL userinfo password
// (percent-encoded or holding '@', '/', '?', '#' or spaces unencoded), the
// password, sslpassword and other secret query parameters, libpq
// key=value secrets (quoted, escaped, spaced around '=') — is replaced,
// and the other fields (host, port, user, dbname, sslmode...) are kept as
// written.
func TestRedactDSN(t *testing.T) {
	t.Parallel()
	cases := []struct{ in, want string }{
		{"host=h user=u password=s3cret dbname=d", "host=h user=u password=xxxxx dbname=d"},
		{"host=h password = s3cret dbname=d sslmode=disable", "host=h password = xxxxx dbname=d sslmode=disable"},
		{`host=h password='s e c\'r3t' dbname=d sslpassword=k3ypw`, "host=h password='xxxxx' dbname=d sslpassword=xxxxx"},
		{`user=u password=a\ b\ s3cret dbname=d`, "user=u password=xxxxx dbname=d"},
		{"host=h password='unterminated s3cret dbname=d", "host=h password='xxxxx'"},
		{"host=h PassWord=s3cret dbname=d", "host=h PassWord=xxxxx dbname=d"},
		{"postgres://nobody@127.0.0.1:1/db?sslmode=disable&sslpassword=k3ypw", "postgres://nobody@127.0.0.1:1/db?sslmode=disable&sslpassword=xxxxx"},
		{"postgres://u:s3cret@h:5432/db?sslmode=require&application_name=a@b", "postgres://u:xxxxx@h:5432/db?sslmode=require&application_name=a@b"},
		{"postgres://u:s3cret%40x@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3cret@ss/w@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:12/s3cret=y@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:12?s3cret=y@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3#cret@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u:s3cret with space@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://h/db?password=s3cret&tail&sslmode=disable", "postgres://h/db?password=xxxxx&xxxxx&sslmode=disable"},
		{"postgres://u:s3cret@h/db?PASSWORD=s3cret&SslPassword=k3ypw&token=s3cret", "postgres://u:xxxxx@h/db?PASSWORD=xxxxx&SslPassword=xxxxx&token=xxxxx"},
		{"postgres://h:5432/db?user=me@corp.example&sslmode=disable", "postgres://h:5432/db?user=me@corp.example&sslmode=disable"},
		{"postgresql://u:s3cret@[::1]:5432/db", "postgresql://u:xxxxx@[::1]:5432/db"},
		{"postgres://u:s3cret@h1:5432,h2:5433/db?target_session_attrs=read-write", "postgres://u:xxxxx@h1:5432,h2:5433/db?target_session_attrs=read-write"},
		{"postgres://u:s3cret@[::1", "postgres://u:xxxxx@[::1"},
		{"postgres://u@h/db?sslkey=/k/client.key&sslcert=/k/client.crt&passfile=/k/pgpass", "postgres://u@h/db?sslkey=/k/client.key&sslcert=/k/client.crt&passfile=/k/pgpass"},
		{"sqlite:./dev.db", "sqlite:./dev.db"},
		{"sqlite::memory:", "sqlite::memory:"},
	}
	for _, c := range cases {
		got := agentstore.RedactDSN(c.in)
		if got != c.want {
			t.Errorf("RedactDSN(%q)\n = %q\nwant %q", c.in, got, c.want)
		}
		for _, secret := range []string{"s3cret", "k3ypw", "s3#cret"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactDSN(%q) = %q shows %q", c.in, got, secret)
			}
		}
	}
}

// wantNoDriverText fails t when msg carries text of pgx, database/sql,
// net or SQLite rather than the Store's own words.
func wantNoDriverText(t *testing.T, what, msg string) {
	t.Helper()
	for _, w := range []string{"failed to connect", "dial error", "dial tcp", "SQLSTATE", "FATAL", "pgconn", "server error", "unable to open database file",
		"sqlite3", "sql: ", "cannot parse `", "x509:", "tls:", "(08", "(28", "(3D"} {
		if strings.Contains(msg, w) {
			t.Errorf("%s: message carries driver text %q: %s", what, w, msg)
		}
	}
}

// TestOpen_PostgresFailuresSayWhy: Open of an unreachable or misconfigured
// PostgreSQL fails with an *OpenError saying why in the Store's words —
// connection refused, unknown database, unknown role, a role that may not
// log in, a TLS certificate the client refuses, an unreadable sslrootcert,
// a malformed DSN — matching ErrRetryable for the transient causes and
// ErrInvalidConfig for the configuration mistakes; the DSN is named
// redacted (no password, no sslpassword), no driver text is shown, and
// the driver's error stays reachable with errors.As. A call whose own
// context ended first matches that context error, not retryable.
func TestOpen_PostgresFailuresSayWhy(t *testing.T) {
	t.Parallel()
	admin := requirePostgres(t)
	u, err := url.Parse(postgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	role := "nologin_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	if _, err := admin.Exec(`CREATE ROLE "` + role + `" NOLOGIN`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(`DROP ROLE IF EXISTS "` + role + `"`) })
	caFile := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(caFile, selfSignedCAPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	const pw, keypw = "Pw-0pen-f41l", "Key-pw-0pen"
	with := func(user, db, query string) string {
		return "postgres://" + user + ":" + pw + "@" + u.Host + "/" + db + "?sslpassword=" + keypw + "&" + query
	}
	cases := []struct {
		name, dsn, reason string
		kind              error
	}{
		{"refused", "postgres://nobody:" + pw + "@127.0.0.1:1/db?sslmode=disable&sslpassword=" + keypw, "connection refused", agentstore.ErrRetryable},
		{"refused key=value", "host=127.0.0.1 port=1 user=nobody password=" + pw + " dbname=db sslmode=disable sslpassword=" + keypw, "connection refused", agentstore.ErrRetryable},
		{"unknown host", "postgres://nobody:" + pw + "@no-such-host.invalid:5432/db?sslmode=disable&sslpassword=" + keypw, `host "no-such-host.invalid" not found`, agentstore.ErrRetryable},
		{"unknown database", with("postgres", "no_such_db_x", "sslmode=disable"), `database "no_such_db_x" does not exist`, agentstore.ErrInvalidConfig},
		{"unknown role", with("no_such_role_x", "test", "sslmode=disable"), `refused user "no_such_role_x"`, agentstore.ErrInvalidConfig},
		{"role may not log in", with(role, "test", "sslmode=disable"), `refused user "` + role + `"`, agentstore.ErrInvalidConfig},
		{"untrusted certificate", with("postgres", "test", "sslmode=verify-full&sslrootcert="+url.QueryEscape(caFile)), "TLS certificate was not accepted", agentstore.ErrInvalidConfig},
		{"missing sslrootcert", with("postgres", "test", "sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem"), "cannot read file /nonexistent/ca.pem", agentstore.ErrInvalidConfig},
		{"bad port", "postgres://nobody:" + pw + "@127.0.0.1:notaport/db?sslpassword=" + keypw, "cannot parse the PostgreSQL DSN", agentstore.ErrInvalidConfig},
	}
	for _, c := range cases {
		_, err := agentstore.Open(ctx, c.dsn, agentstore.WithPool(agentstore.PoolConfig{ConnectTimeout: 5 * time.Second}))
		if err == nil {
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		msg := err.Error()
		if !errors.Is(err, c.kind) || !strings.Contains(msg, c.reason) || !strings.HasPrefix(msg, "agentstore: ") {
			t.Errorf("%s: Open = %q, want %q matching %v", c.name, msg, c.reason, c.kind)
		}
		if c.kind == agentstore.ErrInvalidConfig && agentstore.IsRetryable(err) {
			t.Errorf("%s: a configuration mistake is retryable: %v", c.name, err)
		}
		if strings.Contains(msg, pw) || strings.Contains(msg, keypw) || strings.Contains(fmt.Sprintf("%+v", err), pw) {
			t.Errorf("%s: the error shows a secret: %s", c.name, msg)
		}
		if !strings.Contains(msg, agentstore.RedactDSN(c.dsn)) {
			t.Errorf("%s: the error does not name the redacted DSN %q: %s", c.name, agentstore.RedactDSN(c.dsn), msg)
		}
		wantNoDriverText(t, c.name, msg)
		var oe *agentstore.OpenError
		if c.name != "bad port" && c.name != "missing sslrootcert" && (!errors.As(err, &oe) || oe.Reason == "") {
			t.Errorf("%s: Open = %#v, want an *OpenError", c.name, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = agentstore.Open(cctx, "postgres://nobody@127.0.0.1:1/db?sslmode=disable")
	if !errors.Is(err, context.Canceled) || agentstore.IsRetryable(err) {
		t.Fatalf("Open with a cancelled context = %v, want context.Canceled, not retryable", err)
	}
}

// TestOpen_SQLiteFailuresNamePath: a SQLite file Open cannot use — in a
// missing directory (read-write and read-only, as `agentstore verify
// --dsn sqlite:./missing/nope.db` opens it), missing under WithReadOnly,
// a directory, not a database, unreadable — fails with an *OpenError that
// names the path and says why, matching ErrInvalidConfig, with no SQLite
// driver text.
func TestOpen_SQLiteFailuresNamePath(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	missingDir := filepath.Join(dir, "missing")
	rel := "missing_" + strings.ReplaceAll(uuid.NewString(), "-", "")
	cases := []struct {
		name, path, reason string
		opts               []agentstore.Option
	}{
		{"missing directory", filepath.Join(missingDir, "nope.db"), "directory " + missingDir + " does not exist", nil},
		{"missing directory, read-only", filepath.Join(missingDir, "nope.db"), "directory " + missingDir + " does not exist", []agentstore.Option{agentstore.WithReadOnly()}},
		{"missing file, read-only", filepath.Join(dir, "nope.db"), "the file does not exist", []agentstore.Option{agentstore.WithReadOnly()}},
		{"a directory", dir, "it is a directory", nil},
		{"not a database", garbage, "not a SQLite database", nil},
		// as `agentstore verify --dsn sqlite:./missing/nope.db` opens it
		{"relative path, read-only", "./" + rel + "/nope.db", "directory ./" + rel + " does not exist", []agentstore.Option{agentstore.WithReadOnly()}},
	}
	if os.Geteuid() != 0 {
		locked := filepath.Join(dir, "locked.db")
		if err := os.WriteFile(locked, nil, 0o000); err != nil {
			t.Fatal(err)
		}
		cases = append(cases, struct {
			name, path, reason string
			opts               []agentstore.Option
		}{"unreadable", locked, "permission denied", nil})
	}
	for _, c := range cases {
		_, err := agentstore.Open(context.Background(), "sqlite:"+c.path, c.opts...)
		if err == nil {
			t.Errorf("%s: Open succeeded", c.name)
			continue
		}
		var oe *agentstore.OpenError
		msg := err.Error()
		if !errors.Is(err, agentstore.ErrInvalidConfig) || !errors.As(err, &oe) || !strings.Contains(msg, "open SQLite database "+c.path+": ") ||
			!strings.Contains(msg, c.reason) {
			t.Errorf("%s: Open = %q, want an *OpenError naming %s and %q, matching ErrInvalidConfig", c.name, msg, c.path, c.reason)
		}
		wantNoDriverText(t, c.name, msg)
	}
	if _, err := os.Stat(missingDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed Open created %s", missingDir)
	}
}

// selfSignedCAPEM returns a fresh self-signed CA certificate no server
// uses, in PEM.
func selfSignedCAPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentstore test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestRedactDSNRandomSecrets: random passwords and sslpasswords over an
// alphabet of URL and libpq syntax characters ('@', '/', '?', '#', ':',
// '=', spaces, quotes, backslashes, '%'), written every way a DSN can
// carry them — URL userinfo raw or percent-encoded, password and
// sslpassword query parameters percent-encoded, key=value quoted or
// unquoted with escapes — never show in RedactDSN's output, and neither
// do they in Open's error for such a DSN.
func TestRedactDSNRandomSecrets(t *testing.T) {
	t.Parallel()
	rng := mrand.New(mrand.NewPCG(23, 5))
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789@/?#:= '\\%&"
	secret := func() string {
		b := []byte("Zq9")
		for range 4 + rng.IntN(12) {
			b = append(b, alphabet[rng.IntN(len(alphabet))])
		}
		return string(append(b, "K7w"...))
	}
	// runs returns the alphanumeric runs of s of 4 bytes or more: none may
	// show in a redacted DSN.
	runs := func(s string) []string {
		var out []string
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || 'A' <= r && r <= 'Z') }) {
			if len(f) >= 4 {
				out = append(out, f)
			}
		}
		return out
	}
	kvQuote := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'" }
	kvEscape := func(s string) string { return strings.NewReplacer(`\`, `\\`, ` `, `\ `, `'`, `\'`).Replace(s) }
	checked := 0
	for range 400 {
		pw, kp := secret(), secret()
		forms := []string{
			"postgres://app:" + pw + "@db.internal:5432/agents?sslmode=require&sslpassword=" + url.QueryEscape(kp),
			"postgres://app:" + url.QueryEscape(pw) + "@db.internal:5432/agents?sslmode=require",
			"postgresql://app:" + url.PathEscape(pw) + "@[::1]:5432/agents?application_name=x@y&sslpassword=" + url.QueryEscape(kp),
			"postgres://app@db.internal/agents?password=" + url.QueryEscape(pw) + "&sslmode=disable&sslpassword=" + url.QueryEscape(kp),
			"host=db.internal user=app password=" + kvQuote(pw) + " dbname=agents sslpassword=" + kvQuote(kp),
			"host=db.internal user=app password=" + kvEscape(pw) + " dbname=agents sslpassword = " + kvEscape(kp) + " sslmode=require",
		}
		for _, dsn := range forms {
			red := agentstore.RedactDSN(dsn)
			for _, r := range append(runs(pw), runs(kp)...) {
				if strings.Contains(red, r) {
					t.Fatalf("RedactDSN(%q) = %q shows %q", dsn, red, r)
				}
			}
			if strings.HasPrefix(dsn, "host=") && !strings.Contains(red, "dbname=agents") {
				t.Fatalf("RedactDSN(%q) = %q lost dbname", dsn, red)
			}
			checked++
		}
	}
	// Open's errors for such DSNs (an unreachable host, so nothing waits).
	for range 20 {
		pw := secret()
		for _, dsn := range []string{
			"postgres://app:" + pw + "@127.0.0.1:1/agents?sslmode=disable&sslpassword=" + url.QueryEscape(pw),
			"host=127.0.0.1 port=1 user=app password=" + kvQuote(pw) + " dbname=agents sslmode=disable",
		} {
			_, err := agentstore.Open(context.Background(), dsn)
			if err == nil {
				t.Fatal("Open of an unreachable server succeeded")
			}
			for _, r := range runs(pw) {
				if strings.Contains(err.Error(), r) {
					t.Fatalf("Open(%q) error %q shows %q", dsn, err, r)
				}
			}
		}
	}
	t.Logf("%d DSNs with random secrets redacted", checked)
}
