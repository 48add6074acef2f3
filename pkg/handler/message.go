package handler

import "github.com/molecule-ai/molecule-relay/internal/events"

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
