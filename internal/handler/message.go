package handler

import "github.com/molecule-ai/molecule-relay/pkg/events"

// Message is the inbound message a handler answers: its text, its source
// (a canvas user or a peer agent), the peer's workspace and name, its
// conversation and the activity row it came from. It is the envelope the
// poller publishes, under this package's own name so that a Go handler
// never imports the relay's internal packages.
type Message = events.Inbound

// Attachment is a file attached to a message, an answer, an interim
// message or a question: a name, a MIME type and a URL.
type Attachment = events.Attachment

// AttachmentJSON is an attachment as a structured answer carries it.
type AttachmentJSON = events.AttachmentJSON

// File is an attachment of the message as the relay holds it: the
// attachment's URI, name and MIME type, and either Path, a local copy
// (read it, do not move it: the relay keeps it for a redelivery) with its
// size and SHA-256, or Error, why the relay has none (too large, gone
// from the platform, another workspace's, a scheme it does not fetch).
type File struct {
	URI      string `json:"uri"`
	Name     string `json:"name"`
	MimeType string `json:"mime_type,omitempty"`
	Size     int64  `json:"size,omitempty"`
	Path     string `json:"path,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	Error    string `json:"error,omitempty"`
}
