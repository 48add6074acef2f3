package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/molecule-ai/molecule-relay/internal/registry"
)

// The Workspaces view: the workspace registry (internal/registry) the
// serving relay follows, and its changes. A change is a write to the
// bucket; the relay's own watch of it starts or stops the poller, as
// for `molecule-relay workspaces`. No answer carries a token.

// notice is a sentence for the operator, shown as it is in the page:
// what is wrong and what to do.
type notice string

func (n notice) Error() string { return string(n) }

// registryOff says why there is nothing to change and how to turn it on.
const registryOff notice = "The workspace registry is off in this relay, so its workspaces cannot be changed here. " +
	"To turn it on, set MOLECULE_WORKSPACE_REGISTRY=true and a key, MOLECULE_REGISTRY_KEY_FILE (a file of mode 0600 holding 32 random bytes in base64: " +
	"head -c 32 /dev/urandom | base64 > registry.key && chmod 600 registry.key) or MOLECULE_REGISTRY_KEY, and restart the relay " +
	"(docs/workspace-registry.md). A process that only dispatches never reads the registry: serve the console from connect, poll, reply or `molecule-relay console`."

// writeNeedsAdmin is the answer when NATS refuses this relay's user a
// write of the registry: the stage users may only read it.
const writeNeedsAdmin notice = "This relay's NATS user may read the workspace registry but not change it: only the admin user writes " + registry.Bucket +
	" (infra/nats/accounts.conf), and the stage users must stay without that permission. To change workspaces, run " +
	"`molecule-relay workspaces add|pause|resume|remove` with the admin credentials (NATS_USER=admin and NATS_PASSWORD, or NATS_CREDS), " +
	"or serve a console with them: `molecule-relay console` with the admin credentials, MOLECULE_WORKSPACE_REGISTRY=true and the registry key."

// writeCheckSubject is where the write check publishes: a key no
// workspace has (workspace ids have no dot), never stored (canWrite).
const writeCheckSubject = "$KV." + registry.Bucket + ".console.write-check"

// workspacesView is the view's answer. Writable false means NATS refused
// this relay's user a write (WriteNote says what to do).
type workspacesView struct {
	On         bool           `json:"on"`
	Off        string         `json:"off,omitempty"`
	Writable   bool           `json:"writable"`
	WriteNote  string         `json:"write_note,omitempty"`
	Workspaces []workspaceRow `json:"workspaces"`
}

// workspaceRow is one entry as shown: everything but its token.
type workspaceRow struct {
	ID          string    `json:"id"`
	PlatformURL string    `json:"platform_url"`
	OrgID       string    `json:"org_id,omitempty"`
	Paused      bool      `json:"paused"`
	Added       time.Time `json:"added"`
}

func (c *Console) workspaces(r *http.Request) (any, error) {
	reg := c.opts.Registry
	if reg == nil {
		return workspacesView{Off: string(registryOff), Workspaces: []workspaceRow{}}, nil
	}
	// The running relay's watch of the registry: no request per entry.
	all := reg.Entries()
	v := workspacesView{On: true, Workspaces: make([]workspaceRow, 0, len(all))}
	for _, e := range all {
		v.Workspaces = append(v.Workspaces, workspaceRow{ID: e.ID, PlatformURL: e.PlatformURL, OrgID: e.OrgID, Paused: e.Paused, Added: e.Added})
	}
	var err error
	if v.Writable, err = c.canWrite(r.Context()); err != nil {
		return nil, err
	}
	if !v.Writable {
		v.WriteNote = string(writeNeedsAdmin)
	}
	return v, nil
}

// canWrite says whether NATS lets this relay's user write the registry,
// without writing to it: it publishes to writeCheckSubject expecting a
// last sequence no key has (JetStream stores nothing), then flushes. NATS
// answers a publish its permissions refuse with an error that reaches the
// connection before the flush's answer. The first answer is kept: a
// connection's permissions do not change.
func (c *Console) canWrite(ctx context.Context) (bool, error) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	if c.writeChecked {
		return c.writable, nil
	}
	nc := c.js.Conn()
	m := nats.NewMsg(writeCheckSubject)
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "4611686018427387904")
	err := nc.PublishMsg(m)
	if err == nil {
		err = nc.FlushWithContext(ctx)
	}
	if err != nil {
		return false, fmt.Errorf("console: NATS did not answer whether this relay may change the registry: %w; check the relay's NATS connection, then reload", err)
	}
	c.writeChecked, c.writable = true, !writeRefused(nc)
	return c.writable, nil
}

// writeRefused says whether NATS refused nc a write of the registry.
func writeRefused(nc *nats.Conn) bool {
	err := nc.LastError()
	return errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "$KV."+registry.Bucket+".")
}

// writableRegistry is the registry an action changes, or why it may not.
func (c *Console) writableRegistry(r *http.Request) (*registry.Registry, error) {
	if c.opts.Registry == nil {
		return nil, httpError{http.StatusConflict, registryOff}
	}
	ok, err := c.canWrite(r.Context())
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, httpError{http.StatusForbidden, writeNeedsAdmin}
	}
	return c.opts.Registry, nil
}

// changeFailed words an error of a registry write.
func (c *Console) changeFailed(id string, err error) error {
	switch {
	case errors.Is(err, registry.ErrNotFound):
		return httpError{http.StatusNotFound, fmt.Errorf("workspace %s is not in the registry (another operator may have removed it): reload the list", id)}
	case errors.Is(err, registry.ErrInvalid):
		return badRequest(err)
	case writeRefused(c.js.Conn()):
		return httpError{http.StatusForbidden, writeNeedsAdmin}
	}
	return fmt.Errorf("console: workspace %s was not changed: %w; check this relay's NATS connection and try again", id, err)
}

type addWorkspace struct {
	ID          string `json:"id"`
	PlatformURL string `json:"platform_url"`
	OrgID       string `json:"org_id"`
	Token       string `json:"token"`
}

// workspaceAdd adds a workspace not in the registry yet; its token goes
// into the registry sealed and into no answer or log line.
func (c *Console) workspaceAdd(r *http.Request) (any, error) {
	reg, err := c.writableRegistry(r)
	if err != nil {
		return nil, err
	}
	var in addWorkspace
	if err := decodeBody(r, &in); err != nil {
		return nil, err
	}
	in.ID, in.PlatformURL, in.OrgID = strings.TrimSpace(in.ID), strings.TrimSpace(in.PlatformURL), strings.TrimSpace(in.OrgID)
	if u, err := url.Parse(in.PlatformURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, badRequest(fmt.Errorf("platform URL %q is not an http(s) address: give the platform's base URL, e.g. https://acme.moleculesai.app", in.PlatformURL))
	}
	if strings.TrimSpace(in.Token) == "" {
		return nil, badRequest(errors.New("no token: paste the workspace's token (its platform shows it once, when the workspace is created)"))
	}
	n, err := reg.Seed(r.Context(), []registry.Entry{{ID: in.ID, PlatformURL: in.PlatformURL, OrgID: in.OrgID, Token: in.Token}})
	if err != nil {
		return nil, c.changeFailed(in.ID, err)
	}
	if n == 0 {
		return nil, httpError{http.StatusConflict, fmt.Errorf("workspace %s is already in the registry: to give it another token or platform, remove it and add it again", in.ID)}
	}
	c.log.Info("console: workspace added to the registry", "workspace", in.ID, "platform", in.PlatformURL)
	return map[string]string{"added": in.ID}, nil
}

// workspaceChange pauses, resumes or removes the workspace of the body.
func (c *Console) workspaceChange(verb string) func(*http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		reg, err := c.writableRegistry(r)
		if err != nil {
			return nil, err
		}
		var in struct {
			ID string `json:"id"`
		}
		if err := decodeBody(r, &in); err != nil {
			return nil, err
		}
		if verb == "removed" {
			err = reg.Remove(r.Context(), in.ID)
		} else {
			err = reg.SetPaused(r.Context(), in.ID, verb == "paused")
		}
		if err != nil {
			return nil, c.changeFailed(in.ID, err)
		}
		c.log.Info("console: workspace "+verb+" in the registry", "workspace", in.ID)
		return map[string]string{verb: in.ID}, nil
	}
}
