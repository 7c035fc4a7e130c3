package dialect

import (
	"net/url"
	"regexp"
	"strings"
)

var (
	// kvPasswordRE finds a password in key=value DSNs (libpq syntax; an
	// unquoted value is redacted to the end of the DSN, to be safe;
	// spaces around '=', single-quoted values) and in URL query strings.
	kvPasswordRE    = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|.*)`)
	queryPasswordRE = regexp.MustCompile(`(?i)(password=)([^&#]*)`)
)

// RedactDSN returns dsn with any password replaced by "xxxxx", for logs.
func RedactDSN(dsn string) string {
	// Redact "scheme://user:password@" by hand first: url.Parse fails on
	// passwords with spaces or stray characters, and must not leak them.
	// The last "@" is used so that a password holding "@", "/", "?" or
	// "#" is covered whole (over-redacting a query is harmless).
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 {
				dsn = dsn[:i+3] + rest[:c] + ":xxxxx" + rest[at:]
			}
		}
	}
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		re := kvPasswordRE
		if strings.Contains(dsn, "://") {
			re = queryPasswordRE
		}
		if re.MatchString(dsn) {
			return re.ReplaceAllString(dsn, "${1}xxxxx")
		}
		if err != nil {
			return "<unparsable DSN>"
		}
		return dsn
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// Scrub removes the DSN's password from an error message.
func Scrub(err error, dsn string) error {
	if err == nil {
		return nil
	}
	pw := dsnPassword(dsn)
	if pw == "" || !strings.Contains(err.Error(), pw) {
		return err
	}
	return &scrubbedError{msg: strings.ReplaceAll(err.Error(), pw, "xxxxx"), err: err}
}

type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }

// Unwrap keeps errors.Is working on scrubbed errors.
func (e *scrubbedError) Unwrap() error { return e.err }

// dsnPassword returns the password dsn carries ("" when none).
func dsnPassword(dsn string) string {
	if i := strings.Index(dsn, "://"); i >= 0 {
		rest := dsn[i+3:]
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			if c := strings.Index(rest[:at], ":"); c >= 0 && c+1 < at {
				return rest[c+1 : at]
			}
		}
	}
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok {
			return pw
		}
		if pw := u.Query().Get("password"); pw != "" {
			return pw
		}
	}
	return ""
}
