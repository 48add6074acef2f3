package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// uploadTimeout bounds an answer's uploads (a 25 MiB file on a slow link).
const uploadTimeout = 2 * time.Minute

// uploadLocal uploads the local files an answer attaches, here, where the
// handler wrote them (the replier may run elsewhere), before the handled
// record: the uploads are recorded (Uploads), so a redelivery that runs
// the handler again reuses them.
func (d *Dispatcher) uploadLocal(ctx context.Context, in *events.Inbound, atts []events.Attachment) ([]events.Attachment, error) {
	if !filecache.HasLocal(atts) {
		return atts, nil
	}
	switch {
	case in.Source == events.SourcePeerAgent:
		return nil, fmt.Errorf("%w: the answer attaches a local file, which only a canvas user can be sent (a peer cannot read this workspace's uploads); attach an http(s) URL", handler.ErrPermanent)
	case d.cfg.Uploads == nil:
		return nil, fmt.Errorf("%w: the answer attaches a local file and this relay uploads none (an http: handler's paths are not this machine's)", handler.ErrPermanent)
	}
	ctx, cancel := context.WithTimeout(ctx, uploadTimeout)
	defer cancel()
	return d.cfg.Uploads.Upload(ctx, in.WorkspaceID, in.ActivityID, atts)
}
