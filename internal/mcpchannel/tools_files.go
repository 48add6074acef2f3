package mcpchannel

import (
	"context"
	"errors"
	"strings"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"github.com/molecule-ai/molecule-relay/internal/filecache"
	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// ToolDownloadAttachment fetches a file named in a message into the
// relay's attachment cache and answers its local path: for an attachment
// the channel could not hold when it showed the message (meta
// attachment_error), or one a message names in its text.
const ToolDownloadAttachment = "download_attachment"

func (s *Server) addFileTools(add func(mcp.Tool, server.ToolHandlerFunc)) {
	// Repeating it reads the same cached file: idempotent, read-only on
	// the platform apart from the upload's ack.
	add(tool(ToolDownloadAttachment, with(hints(false, false, true),
		mcp.WithDescription("Download a file named in a Molecule message (a platform-pending: upload, or a workspace: file) and return its local path, size and sha256. "+
			"A file already held (meta attachment_path) is not fetched again; an upload is acked once it is on disk."),
		mcp.WithString("uri", mcp.Required(), mcp.Description("the attachment's URI (meta attachment_path / attachment_N_path when not held, or from the text)")),
		mcp.WithString("name", mcp.Description("file name to keep (default: from the URI)")),
		asWorkspace,
	)...), s.toolDownloadAttachment)
}

func (s *Server) toolDownloadAttachment(ctx context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	uri := strings.TrimSpace(req.GetString("uri", ""))
	if uri == "" {
		return toolError("uri is required"), nil
	}
	be, err := s.backend()
	if err != nil {
		return toolError("%v", err), nil
	}
	if be.rt == nil || be.rt.FileCache() == nil {
		return toolError("download_attachment: the relay keeps no attachment cache (MOLECULE_FILES_DIR=off)"), nil
	}
	ws := strings.TrimSpace(req.GetString("_as_workspace", ""))
	if owner, _, perr := molecule.ParsePendingURI(uri); perr == nil && ws == "" {
		ws = owner // the upload's own workspace, if watched; refused below otherwise
	}
	c, err := s.client(ws)
	if err != nil {
		return toolError("%v", err), nil
	}
	name := req.GetString("name", "")
	if name == "" {
		name = uri[strings.LastIndexAny(uri, "/:")+1:]
	}
	f := be.rt.FileCache().FetchOne(ctx, c.WorkspaceID(), events.Attachment{URI: uri, Name: name})
	if f.Error != "" {
		return toolError("download_attachment: %s", f.Error), nil
	}
	return jsonResult(f)
}

// uploadLocal uploads the local files of a message to the canvas user of
// ws before it is queued, recorded under answer (the message's
// idempotency key), so a retried call posts the same uploads.
func uploadLocal(ctx context.Context, be Backend, ws, answer string, atts []events.Attachment) ([]events.Attachment, error) {
	if !filecache.HasLocal(atts) {
		return atts, nil
	}
	if be.rt == nil {
		return nil, errors.New("local files cannot be uploaded without the relay's store")
	}
	return be.rt.Uploader().Upload(ctx, ws, answer, atts)
}
