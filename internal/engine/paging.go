package engine

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/agentstore/agentstore/repo"
)

// Keyset paging (repo.PageParams) of both domains. A cursor is the
// base64url text of a small JSON object: the kind of walk it belongs to
// and the sort key of the last row of its page. It is opaque to callers;
// a cursor of another kind or one that does not decode is ErrInvalidInput.

// pageCursor is the decoded form of a cursor; which fields are set
// depends on the kind.
type pageCursor struct {
	Kind string    `json:"k"`
	T    time.Time `json:"t,omitempty"` // created_at of a session-domain row
	ID   string    `json:"i,omitempty"` // row id (uuid text, instance id)
	N    int64     `json:"n,omitempty"` // seq, execution id, created_at ms
	P    int32     `json:"p,omitempty"` // queue priority
}

// Cursor kinds.
const (
	curChildren   = "children"
	curSummaries  = "summaries"
	curPlans      = "plans"
	curPending    = "pending"
	curInstances  = "instances"
	curByStatus   = "instances_by_status"
	curExecutions = "executions"
	// provider admin extensions (duroxide.ProviderAdminExt)
	curInstanceChildren = "instance_children"
	curHistory          = "history"
)

// pageLimit validates p.Limit and returns the page size.
func pageLimit(p repo.PageParams) (int, error) {
	switch {
	case p.Limit < 0 || p.Limit > repo.MaxPageLimit:
		return 0, invalidf("page limit %d outside 0..%d", p.Limit, repo.MaxPageLimit)
	case p.Limit == 0:
		return repo.DefaultPageLimit, nil
	}
	return p.Limit, nil
}

// decodeCursor returns the cursor p.After of kind, or nil for "".
func decodeCursor(p repo.PageParams, kind string) (*pageCursor, error) {
	if p.After == "" {
		return nil, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(p.After)
	var c pageCursor
	if err == nil {
		err = json.Unmarshal(b, &c)
	}
	if err != nil {
		return nil, invalidf("page cursor %q does not decode", clip(p.After))
	}
	if c.Kind != kind {
		return nil, invalidf("page cursor %q is a cursor of another call (%s, not %s)", clip(p.After), clip(c.Kind), kind)
	}
	return &c, nil
}

// encodeCursor returns the text of c.
func encodeCursor(c pageCursor) string {
	b, _ := json.Marshal(c) // a struct of plain fields always encodes
	return base64.RawURLEncoding.EncodeToString(b)
}
