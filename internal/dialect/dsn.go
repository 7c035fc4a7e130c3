package dialect

import (
	"net/url"
	"regexp"
	"sort"
	"strings"
)

// Redaction of the secrets a DSN can carry, for every place a DSN (or an
// error that may quote one) is printed.

// redacted replaces a secret.
const redacted = "xxxxx"

// secretDSNKey reports whether the DSN parameter key holds a secret:
// PostgreSQL's password and sslpassword (the passphrase of sslkey), and,
// to be safe with drivers and poolers that add their own, every key that
// names a password, passphrase, secret, token or credential or ends in
// "pass" (SQLite's _auth_pass). Paths (passfile, sslkey, sslcert,
// sslrootcert) are not secrets.
func secretDSNKey(key string) bool {
	k := strings.ToLower(strings.TrimSpace(key))
	for _, w := range []string{"password", "passwd", "passphrase", "pwd", "secret", "token", "credential", "apikey", "api_key"} {
		if strings.Contains(k, w) {
			return true
		}
	}
	return strings.HasSuffix(k, "pass")
}

// knownDSNKey reports whether k is one of the PostgreSQL connection parameters (libpq's, pgx's
// and common run-time settings). An '@' inside the value of one of them
// in a URL's query (user=me@corp, application_name=a@b) is taken as
// text; any other '@' after the host may be the end of a password that
// holds '/', '?' or '#' unencoded, and is redacted up to.
func knownDSNKey(k string) bool {
	switch k {
	case "host", "hostaddr", "port", "database", "dbname", "user", "passfile", "connect_timeout", "sslmode", "sslkey", "sslcert", "sslcertmode", "sslrootcert", "sslnegotiation", "sslsni", "krbspn", "krbsrvname", "target_session_attrs", "service", "servicefile", "min_protocol_version", "max_protocol_version", "channel_binding", "require_auth", "application_name", "fallback_application_name", "options", "search_path", "timezone", "client_encoding", "statement_cache_capacity", "description_cache_capacity", "default_query_exec_mode", "gssencmode":
		return true
	}
	return false
}

// RedactDSN returns dsn with every secret replaced by "xxxxx", for logs and
// error messages. It handles URLs (postgres://user:password@host/db?...,
// any scheme) — the userinfo password and every secret query parameter
// (password, sslpassword, and any key naming a password, passphrase,
// secret, token or credential) — go-sql-driver/mysql DSNs
// (user:password@tcp(host:port)/db?params) and libpq key=value DSNs ("host=h
// password='s e c' dbname=d", quoted values included). Everything else
// (host, port, user, dbname, sslmode, paths...) is kept as written. A DSN
// that does not parse is redacted conservatively: text that may be part
// of a password (a password holding '@', '/', '?', '#' or spaces
// unencoded) is replaced too, so a malformed DSN may lose more than its
// secrets, never show one.
func RedactDSN(dsn string) string {
	var r dsnRedactor
	return r.redact(dsn)
}

// dsnRedactor redacts a DSN and remembers the secrets it replaced (see
// scrub).
type dsnRedactor struct{ secrets []string }

func (r *dsnRedactor) secret(raw string) {
	if raw == "" {
		return
	}
	r.secrets = append(r.secrets, raw)
	if dec, err := url.PathUnescape(raw); err == nil && dec != raw {
		r.secrets = append(r.secrets, dec)
	}
	if dec, err := url.QueryUnescape(raw); err == nil && dec != raw {
		r.secrets = append(r.secrets, dec)
	}
}

func (r *dsnRedactor) redact(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		scheme := dsn[:i]
		if !schemeRE.MatchString(scheme) {
			// Not a scheme: whatever precedes "://" is redacted as
			// key=value text (a stray word is replaced whole).
			scheme = r.keyValue(scheme)
		}
		return scheme + "://" + r.url(dsn[:i], dsn[i+3:])
	}
	if m := nativeMySQLRE.FindStringSubmatch(dsn); m != nil {
		// go-sql-driver/mysql's form user:password@tcp(host)/db?params: the
		// password reaches the last '@' before the network.
		r.secret(m[2])
		rest := m[3]
		if q := strings.IndexByte(rest, '?'); q >= 0 {
			rest = rest[:q+1] + r.query(rest[q+1:])
		}
		return m[1] + ":" + redacted + "@" + rest
	}
	if strings.Contains(dsn, "=") {
		return r.keyValue(dsn)
	}
	return dsn
}

// nativeMySQLRE matches go-sql-driver/mysql's DSN with a password:
// user:password@net(address)/dbname[?params].
var nativeMySQLRE = regexp.MustCompile(`^([^:@/]*):(.*)@((?:tcp[46]?|unix)\(.*)$`)

// url redacts the part of a URL after "scheme://".
func (r *dsnRedactor) url(scheme, rest string) string {
	authEnd := strings.IndexAny(rest, "/?#")
	if authEnd < 0 {
		authEnd = len(rest)
	}
	at := strings.LastIndex(rest[:authEnd], "@") // end of the userinfo, as net/url and pgx read it
	if _, err := url.Parse(scheme + "://" + rest); err != nil {
		// Unparsable (a password holding spaces, or '/', '?' or '#'
		// before a non-numeric "port"): the userinfo may reach the last '@'.
		at = strings.LastIndex(rest, "@")
	} else if strayAt(rest[authEnd:]) && (at >= 0 || strings.Contains(rest[:authEnd], ":")) {
		// An '@' past the host that no known parameter explains: the
		// password may hold '/', '?' or '#' and end there.
		at = strings.LastIndex(rest, "@")
	}
	var b strings.Builder
	if at >= 0 {
		info := rest[:at]
		if c := strings.IndexByte(info, ':'); c >= 0 {
			r.secret(info[c+1:])
			b.WriteString(info[:c+1])
			b.WriteString(redacted)
		} else {
			b.WriteString(info)
		}
		rest = rest[at:]
	}
	q := strings.IndexByte(rest, '?')
	if q < 0 {
		b.WriteString(rest)
		return b.String()
	}
	b.WriteString(rest[:q+1])
	b.WriteString(r.query(rest[q+1:]))
	return b.String()
}

// strayAt reports whether after (a URL past its host) holds an '@' that
// is not inside the value of a known query parameter.
func strayAt(after string) bool {
	if !strings.Contains(after, "@") {
		return false
	}
	q := strings.IndexByte(after, '?')
	if q < 0 || strings.Contains(after[:q], "@") {
		return true
	}
	for _, part := range strings.Split(after[q+1:], "&") {
		if !strings.Contains(part, "@") {
			continue
		}
		eq := strings.IndexByte(part, '=')
		if eq < 0 || strings.Contains(part[:eq], "@") || strings.Contains(part, "#") || !knownDSNKey(strings.ToLower(unescapeKey(part[:eq]))) {
			return true
		}
	}
	return false
}

func unescapeKey(k string) string {
	if u, err := url.QueryUnescape(k); err == nil {
		return u
	}
	return k
}

// query redacts a URL query: the value of every secret parameter, and
// every part without '=' (which may be the rest of a password holding
// '&'). A secret value runs to the next '&' ('#' included).
func (r *dsnRedactor) query(q string) string {
	parts := strings.Split(q, "&")
	for i, part := range parts {
		eq := strings.IndexByte(part, '=')
		switch {
		case eq < 0:
			if part != "" {
				r.secret(part)
				parts[i] = redacted
			}
		case secretDSNKey(unescapeKey(part[:eq])):
			r.secret(part[eq+1:])
			parts[i] = part[:eq+1] + redacted
		}
	}
	return strings.Join(parts, "&")
}

// isDSNSpace is libpq's (and pgx's) white space in key=value DSNs.
func isDSNSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

// keyValue redacts a libpq key=value DSN, tokenised as pgx does: a value
// is single-quoted (backslash escapes; an unterminated quote runs to the
// end) or runs to the next unescaped white space. Values of secret keys
// are replaced; a word without '=' (which may be the rest of a password
// holding a space) is replaced whole.
func (r *dsnRedactor) keyValue(s string) string {
	var b strings.Builder
	i := 0
	for i < len(s) {
		j := i
		for j < len(s) && isDSNSpace(s[j]) {
			j++
		}
		b.WriteString(s[i:j])
		if i = j; i >= len(s) {
			break
		}
		eq := strings.IndexByte(s[i:], '=')
		word := len(s)
		for k := i; k < len(s); k++ {
			if isDSNSpace(s[k]) {
				word = k
				break
			}
		}
		if eq < 0 || i+eq > word && !onlySpaceUntilEq(s[word:]) {
			// A word without '=': replace it whole.
			r.secret(s[i:word])
			b.WriteString(redacted)
			i = word
			continue
		}
		key := s[i : i+eq]
		b.WriteString(key)
		b.WriteByte('=')
		i += eq + 1
		for j = i; j < len(s) && isDSNSpace(s[j]); j++ {
		}
		b.WriteString(s[i:j])
		i = j
		end, quoted := kvValueEnd(s, i)
		if secretDSNKey(key) {
			r.secretKV(s[i:end], quoted)
			if quoted {
				b.WriteString("'" + redacted + "'")
			} else {
				b.WriteString(redacted)
			}
		} else {
			b.WriteString(s[i:end])
		}
		i = end
	}
	return b.String()
}

// onlySpaceUntilEq reports whether s is white space up to an '=' (a key
// followed by " = value").
func onlySpaceUntilEq(s string) bool {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '=':
			return true
		case !isDSNSpace(s[i]):
			return false
		}
	}
	return false
}

// kvValueEnd returns the end of the key=value value starting at s[i] and
// whether it is quoted.
func kvValueEnd(s string, i int) (int, bool) {
	if i < len(s) && s[i] == '\'' {
		for k := i + 1; k < len(s); k++ {
			switch s[k] {
			case '\\':
				k++
			case '\'':
				return k + 1, true
			}
		}
		return len(s), true
	}
	for k := i; k < len(s); k++ {
		switch {
		case isDSNSpace(s[k]):
			return k, false
		case s[k] == '\\':
			k++
		}
	}
	return len(s), false
}

// secretKV remembers a key=value secret as written and as pgx reads it.
func (r *dsnRedactor) secretKV(v string, quoted bool) {
	r.secret(v)
	if quoted {
		v = strings.TrimSuffix(strings.TrimPrefix(v, "'"), "'")
		r.secret(v)
	}
	r.secret(strings.NewReplacer(`\\`, `\`, `\'`, `'`, `\ `, ` `).Replace(v))
}

// dsnSecrets returns the secrets dsn carries (as written, and decoded),
// longest first.
func dsnSecrets(dsn string) []string {
	var r dsnRedactor
	r.redact(dsn)
	out := r.secrets[:0]
	seen := map[string]bool{}
	for _, s := range r.secrets {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s, url.QueryEscape(s), url.PathEscape(s))
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Scrub returns err with every secret of dsn removed from its message
// (the error chain is kept for errors.Is and errors.As).
func Scrub(err error, dsn string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, s := range dsnSecrets(dsn) {
		out = strings.ReplaceAll(out, s, redacted)
	}
	if out == msg {
		return err
	}
	return &scrubbedError{msg: out, err: err}
}

// scrubbedError is an error whose message had secrets removed.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }

// Unwrap keeps errors.Is and errors.As working on scrubbed errors.
func (e *scrubbedError) Unwrap() error { return e.err }

// schemeRE matches a URL scheme.
var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]{0,31}$`)
