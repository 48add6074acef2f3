package mcpchannel

// A message's attachments in a notification, as the TypeScript channel
// gives them to Claude (enteros-mcp-claude-channel 4255a28 server.ts
// 633-650, flattenAttachmentMeta): attachment_count, then per attachment
// <prefix>_kind, _path, _name, _mime with prefix "attachment" for the
// first and "attachment_<n>" for the n-th, and image_path for a first
// attachment that is an image held locally. _path is the local copy when
// the relay holds one (the channel's rewritten platform-pending: URI),
// else the URI. The relay adds <prefix>_error when it holds no copy, and
// a content line per attachment with the path in full.

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

func addAttachments(b *strings.Builder, meta map[string]string, atts []events.Attachment, files []handler.File) {
	if len(atts) == 0 {
		return
	}
	meta["attachment_count"] = strconv.Itoa(len(atts))
	for i, a := range atts {
		f := handler.File{URI: a.URI, Name: a.Name, MimeType: a.MimeType}
		if i < len(files) && files[i].URI == a.URI {
			f = files[i]
		}
		prefix := "attachment"
		if i > 0 {
			prefix = "attachment_" + strconv.Itoa(i+1)
		}
		kind := attachmentKind(f.MimeType)
		where := f.Path
		if where == "" {
			where = f.URI
		}
		meta[prefix+"_kind"] = kind
		setIf(meta, prefix+"_path", where)
		setIf(meta, prefix+"_name", f.Name)
		setIf(meta, prefix+"_mime", f.MimeType)
		setIf(meta, prefix+"_error", f.Error)
		if i == 0 && kind == "image" && strings.HasPrefix(f.Path, "/") {
			meta["image_path"] = f.Path
		}
		fmt.Fprintf(b, "\n[attachment %s · %s · %s]", Sanitize(f.Name), Sanitize(f.MimeType), oneLine(where))
		if f.Error != "" {
			fmt.Fprintf(b, " (not held: %s; download_attachment({uri: %q}) tries again)", oneLine(f.Error), oneLine(f.URI))
		}
	}
}

// attachmentKind is the part kind the TypeScript channel reports: the
// canvas sends every upload as a "file" part, so the relay names an image
// by its MIME type.
func attachmentKind(mime string) string {
	if strings.HasPrefix(mime, "image/") {
		return "image"
	}
	return "file"
}

func setIf(meta map[string]string, k, v string) {
	if v != "" {
		meta[k] = v
	}
}

// oneLine keeps a path or URI whole but on one line.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
