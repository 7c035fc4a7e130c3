package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/agentstore/agentstore/internal/dialect"
	"github.com/agentstore/agentstore/models"
	"github.com/agentstore/agentstore/repo"
)

// Full-text search over messages (repo.Sessions.Search). The engine parses
// the query (dialect.ParseSearchQuery: words only, never query syntax),
// builds the filters and the cursor, and hands the dialect's Searcher the
// page to read; the index itself (FTS4 on SQLite, a tsvector column and
// GIN index on PostgreSQL) is kept in step by triggers the migration V8
// creates, in the transaction of every insert and delete of a message.

// DefaultSearchLanguage is the text search configuration of a Store
// without WithSearchLanguage (PostgreSQL's "simple": lower-casing only).
const DefaultSearchLanguage = "simple"

// WithSearchLanguage sets the PostgreSQL text search configuration the
// Store's Search parses queries with (default DefaultSearchLanguage,
// "simple"): "english" stems words (running matches run) and drops
// English stop words. It must name the configuration the database's
// search column is built with: V8 builds it with "simple", and Verify
// reports a Store whose language differs from the database's, with the
// SQL that rebuilds the column (see docs/search.md). name must match
// ^[A-Za-z_][A-Za-z0-9_]*$ (ErrInvalidConfig otherwise). SQLite ignores it
// (its index folds case and diacritics and never stems).
func WithSearchLanguage(name string) Option {
	return optionFunc(func(c *Config) error {
		if !identRE.MatchString(name) || len(name) > 63 {
			return configf("search language %q must match ^[A-Za-z_][A-Za-z0-9_]*$ and be at most 63 bytes", clip(name))
		}
		c.SearchLanguage = name
		return nil
	})
}

// searchCursor is the decoded form of a Search cursor: the last hit's
// key and a hash of the query and filters it belongs to.
type searchCursor struct {
	Kind  string  `json:"k"`
	Score float64 `json:"s"`
	ID    string  `json:"i"`
	Seq   int64   `json:"n"`
	Hash  string  `json:"h"`
}

const curSearch = "search"

// Search implements repo.Sessions.
func (ss *sessionStore) Search(ctx context.Context, p repo.SearchParams) (repo.SearchPage, error) {
	if ss.scopeErr != nil {
		return repo.SearchPage{}, ss.scopeErr
	}
	fail := func(err error) (repo.SearchPage, error) {
		return repo.SearchPage{}, fmt.Errorf("search messages: %w", err)
	}
	if ss.s.cfg.codec != nil {
		return fail(ErrContentEncrypted)
	}
	terms, err := dialect.ParseSearchQuery(p.Query)
	if err != nil {
		return fail(err)
	}
	limit := p.Limit
	switch {
	case limit < 0 || limit > repo.MaxSearchLimit:
		return fail(invalidf("limit %d outside 0..%d", limit, repo.MaxSearchLimit))
	case limit == 0:
		limit = repo.DefaultSearchLimit
	}
	q := &dialect.SearchQuery{Terms: terms, Language: ss.s.searchLanguage(), Limit: limit + 1}
	var key strings.Builder // what the cursor is bound to
	for _, t := range terms {
		for _, w := range t.Words {
			key.WriteString(w.Text)
			if w.Prefix {
				key.WriteByte('*')
			}
			key.WriteByte(' ')
		}
		key.WriteByte('|')
	}
	tenant := p.TenantID
	if ss.tenant != nil {
		tenant = ss.tenant
	}
	sessions := ss.s.quoted(models.TableSessions)
	switch {
	case tenant != nil && *tenant == "":
		q.Filter += " AND m.session_id IN (SELECT id FROM " + sessions + " WHERE tenant_id IS NULL)"
		key.WriteString("t:null|")
	case tenant != nil:
		if err := checkText("tenant id", *tenant, repo.MaxIDLen); err != nil {
			return fail(err)
		}
		q.Filter += " AND m.session_id IN (SELECT id FROM " + sessions + " WHERE tenant_id = ?)"
		q.FilterArgs = append(q.FilterArgs, *tenant)
		key.WriteString("t:" + *tenant + "|")
	}
	if p.SessionID != nil {
		q.Filter += " AND m.session_id = ?"
		q.FilterArgs = append(q.FilterArgs, *p.SessionID)
		key.WriteString("s:" + p.SessionID.String() + "|")
	}
	if len(p.Roles) > 0 {
		ph := make([]string, len(p.Roles))
		for i, r := range p.Roles {
			role, err := repo.ParseRole(string(r))
			if err != nil {
				return fail(err)
			}
			ph[i] = "?"
			q.FilterArgs = append(q.FilterArgs, string(role))
			key.WriteString("r:" + string(role) + "|")
		}
		q.Filter += " AND m.role IN (" + strings.Join(ph, ",") + ")"
	}
	if p.CreatedFrom != nil {
		t := p.CreatedFrom.UTC().Truncate(time.Microsecond)
		q.Filter += " AND m.created_at >= ?"
		q.FilterArgs = append(q.FilterArgs, t)
		key.WriteString("f:" + t.Format(time.RFC3339Nano) + "|")
	}
	if p.CreatedBefore != nil {
		t := p.CreatedBefore.UTC().Truncate(time.Microsecond)
		q.Filter += " AND m.created_at < ?"
		q.FilterArgs = append(q.FilterArgs, t)
		key.WriteString("b:" + t.Format(time.RFC3339Nano) + "|")
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(key.String()))
	hash := strconv.FormatUint(h.Sum64(), 36)
	if p.After != "" {
		c, err := decodeSearchCursor(p.After, hash)
		if err != nil {
			return fail(err)
		}
		q.After = c
	}
	sr, ok := ss.s.d.(dialect.Searcher)
	if !ok {
		return fail(configf("the %s dialect has no message search", ss.s.d.Title()))
	}
	var rows []dialect.SearchRow
	err = ss.s.readTx(ss.db(ctx), func(tx *gorm.DB) error {
		var err error
		rows, err = sr.SearchPage(tx, ss.s.env(), q)
		if err != nil {
			return translateVia(ss.s.db, err)
		}
		return nil
	})
	if err != nil {
		return fail(dbErr(err))
	}
	page := repo.SearchPage{Hits: make([]repo.SearchHit, 0, min(len(rows), limit))}
	for i, r := range rows {
		if i == limit {
			last := rows[i-1]
			page.Next = encodeSearchCursor(searchCursor{Kind: curSearch, Score: last.Score, ID: last.SessionID.String(), Seq: last.Seq, Hash: hash})
			break
		}
		var created dbTime
		if err := created.Scan(r.CreatedAt); err != nil || !created.Valid {
			if err == nil {
				err = fmt.Errorf("timestamp cannot be read")
			}
			return fail(corrupt(models.TableMessages, fmt.Sprintf("%s/%d", r.SessionID, r.Seq), "created_at", err))
		}
		role, err := repo.ParseRole(r.Role)
		if err != nil {
			return fail(corrupt(models.TableMessages, fmt.Sprintf("%s/%d", r.SessionID, r.Seq), "role", err))
		}
		snippet, spans := highlightSpans(r.Snippet)
		page.Hits = append(page.Hits, repo.SearchHit{SessionID: r.SessionID, MessageID: r.ID, Seq: r.Seq, Role: role,
			CreatedAt: created.T, Snippet: snippet, Highlights: spans, Score: r.Score})
	}
	return page, nil
}

// searchLanguage is the Store's text search configuration.
func (s *Store) searchLanguage() string {
	if s.cfg.SearchLanguage != "" {
		return s.cfg.SearchLanguage
	}
	return DefaultSearchLanguage
}

// highlightSpans removes the dialect's highlight markers from s and
// returns the text and the byte ranges they enclosed (an unbalanced
// marker is dropped).
func highlightSpans(s string) (string, []repo.TextSpan) {
	if !strings.Contains(s, dialect.SnippetOpen) {
		return strings.ReplaceAll(s, dialect.SnippetClose, ""), nil
	}
	var (
		b     strings.Builder
		spans []repo.TextSpan
		open  = -1
	)
	for len(s) > 0 {
		switch {
		case strings.HasPrefix(s, dialect.SnippetOpen):
			open = b.Len()
			s = s[len(dialect.SnippetOpen):]
		case strings.HasPrefix(s, dialect.SnippetClose):
			if open >= 0 && b.Len() > open {
				if n := len(spans); n > 0 && spans[n-1].End == open {
					spans[n-1].End = b.Len() // adjacent matches: one span
				} else {
					spans = append(spans, repo.TextSpan{Start: open, End: b.Len()})
				}
			}
			open = -1
			s = s[len(dialect.SnippetClose):]
		default:
			i := strings.IndexAny(s, dialect.SnippetOpen+dialect.SnippetClose)
			if i < 0 {
				i = len(s)
			}
			b.WriteString(s[:i])
			s = s[i:]
		}
	}
	return b.String(), spans
}

func encodeSearchCursor(c searchCursor) string {
	b, _ := json.Marshal(c) // plain fields always encode
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeSearchCursor decodes a Search cursor of the search whose query and
// filters hash to hash.
func decodeSearchCursor(s, hash string) (*dialect.SearchKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	var c searchCursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return nil, invalidf("search cursor %q does not decode", clip(s))
	}
	if c.Kind != curSearch {
		return nil, invalidf("search cursor %q is a cursor of another call (%s)", clip(s), clip(c.Kind))
	}
	if c.Hash != hash {
		return nil, invalidf("search cursor %q belongs to a search with another query or other filters", clip(s))
	}
	id, err := uuid.Parse(c.ID)
	if err != nil || c.Seq < 0 || c.Score < 0 {
		return nil, invalidf("search cursor %q does not decode", clip(s))
	}
	return &dialect.SearchKey{Score: c.Score, SessionID: id, Seq: c.Seq}, nil
}

// Search implements repo.Sessions.
func (a sessionsAPI) Search(ctx context.Context, p repo.SearchParams) (repo.SearchPage, error) {
	page, err := a.ss.Search(ctx, p)
	return page, opErr("search_messages", err)
}

// Search implements repo.Sessions.
func (w tracedSessions) Search(ctx context.Context, p repo.SearchParams) (repo.SearchPage, error) {
	ctx, c := w.t.start(ctx, opSessSearch)
	if p.SessionID != nil {
		c.session(*p.SessionID)
	}
	page, err := w.Sessions.Search(ctx, p)
	c.end(err)
	return page, err
}
