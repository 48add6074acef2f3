package molecule

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// discEntry is a cached Discover answer.
type discEntry struct {
	d       Discovery
	expires time.Time
}

// Discover reads GET /registry/discover/:id, cached for DiscoverTTL. Only
// answers with an http(s) URL are cached: a URL-less or internal answer is
// asked again next time. The platform requires X-Workspace-ID (self) and
// allows only workspaces the hierarchy lets communicate (403 otherwise).
func (c *Client) Discover(ctx context.Context, id string) (*Discovery, error) {
	return c.discover(ctx, id, true)
}

// discover is Discover; retry false sends the GET once (CallPeer falls back
// to the platform proxy rather than wait out a 503 for a URL-less peer).
func (c *Client) discover(ctx context.Context, id string, retry bool) (*Discovery, error) {
	if strings.TrimSpace(id) == "" {
		return nil, fmt.Errorf("%w: discover: workspace id is required", ErrInvalidArgument)
	}
	now := time.Now()
	if c.cfg.DiscoverTTL > 0 {
		c.discMu.Lock()
		e, ok := c.disc[id]
		if ok && now.Before(e.expires) {
			c.discMu.Unlock()
			d := e.d
			return &d, nil
		}
		if ok {
			delete(c.disc, id)
		}
		c.discMu.Unlock()
	}
	r := request{
		method:  http.MethodGet,
		path:    "/registry/discover/" + url.PathEscape(id),
		header:  http.Header{"X-Workspace-Id": {c.cfg.WorkspaceID}},
		noRetry: !retry,
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	var d Discovery
	if err := decodeJSON(r, resp.body, &d); err != nil {
		return nil, err
	}
	if d.ID == "" {
		d.ID = id
	}
	if c.cfg.DiscoverTTL > 0 && isHTTPURL(d.URL) {
		c.discMu.Lock()
		c.disc[id] = discEntry{d: d, expires: now.Add(c.cfg.DiscoverTTL)}
		c.discMu.Unlock()
	}
	return &d, nil
}

// InvalidateDiscovery drops id's cached discovery (all entries if id is "").
func (c *Client) InvalidateDiscovery(id string) {
	c.discMu.Lock()
	defer c.discMu.Unlock()
	if id == "" {
		clear(c.disc)
		return
	}
	delete(c.disc, id)
}
