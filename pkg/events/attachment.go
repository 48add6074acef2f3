package events

import "github.com/molecule-ai/molecule-relay/pkg/molecule"

// AttachmentJSON is an attachment as a handler writes it (a structured
// answer, the agent API): snake_case like the rest of what handlers
// write, as issue 13 specified it, while the envelope's Attachment keeps
// A2A's "mimeType".
type AttachmentJSON struct {
	URI      string `json:"uri"`
	Name     string `json:"name"`
	MimeType string `json:"mime_type"`
	Size     int64  `json:"size"`
}

// Attachment converts a handler's attachment to the envelope's.
func (a AttachmentJSON) Attachment() Attachment {
	return Attachment(a) // same fields; only the JSON tags differ
}

// MoleculeAttachments converts envelope attachments to the platform
// client's (notify attachments, A2A file parts); nil for none.
func MoleculeAttachments(in []Attachment) []molecule.Attachment {
	if len(in) == 0 {
		return nil
	}
	out := make([]molecule.Attachment, len(in))
	for i, a := range in {
		out[i] = molecule.Attachment{URI: a.URI, Name: a.Name, MimeType: a.MimeType, Size: a.Size}
	}
	return out
}
