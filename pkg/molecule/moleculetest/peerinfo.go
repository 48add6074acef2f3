package moleculetest

import (
	"encoding/json"
	"net/http"
	"strings"
)

// The 2026-08 feed's include=peer_info (enteros-core aeec8e47
// workspace-server/internal/handlers/activity.go:318-319, 458-461 and
// 635-652): a LEFT JOIN of the row's source_id on workspaces adds
// peer_name and peer_role, agent_card_url is built from the platform's
// external URL and source_id, and attachments[] flattens the request
// body's file parts; each only when not empty, so a canvas row (source_id
// null) gets no peer_* and no agent_card_url.

// SetRole sets a workspace's role (the role of POST /workspaces), which
// include=peer_info reports as peer_role on the rows it sent.
func (s *Server) SetRole(id, role string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.workspaces[id]; w != nil {
		w.role = role
	}
}

// includeFlagSet is activity.go:262: flag is one of the comma-separated
// entries of include.
func includeFlagSet(include, flag string) bool {
	for _, e := range strings.Split(include, ",") {
		if include != "" && strings.TrimSpace(e) == flag {
			return true
		}
	}
	return false
}

// withPeerInfo encodes rows with their peer_info members.
func (s *Server) withPeerInfo(req *http.Request, rows []row) [][]byte {
	base := externalURL(req)
	infos := make([]peerInfo, len(rows))
	s.mu.RLock()
	for i := range rows {
		if id := rows[i].sourceID; id != "" {
			if w := s.workspaces[id]; w != nil { // a deleted workspace keeps its row
				infos[i].name, infos[i].role = w.name, w.role
			}
			infos[i].cardURL = base + "/registry/discover/" + id
		}
	}
	s.mu.RUnlock()
	out := make([][]byte, len(rows))
	for i := range rows {
		infos[i].attachments = rows[i].attachments
		out[i] = encodeRowNew(&rows[i], true, &infos[i])
	}
	return out
}

// externalURL is externalPlatformURL's last resort
// (handlers/external_connection.go:245): scheme and host of the request,
// as X-Forwarded-Proto and X-Forwarded-Host override them.
func externalURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if v := r.Header.Get("X-Forwarded-Proto"); v != "" {
		scheme = v
	}
	host := r.Host
	if v := r.Header.Get("X-Forwarded-Host"); v != "" {
		host = v
	}
	return scheme + "://" + host
}

// requestAttachments is extractAttachmentsFromRequestBody
// (activity.go:115): the file, image, audio and video parts of
// params.message.parts (kind, or v0 type; uri, mime_type and name from a
// nested file object or the part itself), else a flat upload manifest at
// the root (uri or file_id; mimeType or mime_type; kind from the MIME
// type). Nil when there are none.
func requestAttachments(body []byte) []byte {
	var m map[string]any
	if len(body) == 0 || json.Unmarshal(body, &m) != nil {
		return nil
	}
	atts := partAttachments(m)
	if len(atts) == 0 {
		if a := manifestAttachment(m); a != nil {
			atts = []map[string]any{a}
		}
	}
	if len(atts) == 0 {
		return nil
	}
	b, _ := json.Marshal(atts) // sorted keys, as the platform's map
	return b
}

func partAttachments(body map[string]any) []map[string]any {
	params, _ := body["params"].(map[string]any)
	msg, _ := params["message"].(map[string]any)
	parts, _ := msg["parts"].([]any)
	var out []map[string]any
	for _, p := range parts {
		part, ok := p.(map[string]any)
		if !ok {
			continue
		}
		kind, _ := part["kind"].(string)
		if kind == "" {
			kind, _ = part["type"].(string)
		}
		if kind != "file" && kind != "image" && kind != "audio" && kind != "video" {
			continue
		}
		file, ok := part["file"].(map[string]any)
		if !ok {
			file = part
		}
		uri, _ := file["uri"].(string)
		mime, _ := file["mime_type"].(string)
		name, _ := file["name"].(string)
		if a := attachment(kind, uri, mime, name); a != nil {
			out = append(out, a)
		}
	}
	return out
}

func manifestAttachment(body map[string]any) map[string]any {
	uri, _ := body["uri"].(string)
	fileID, _ := body["file_id"].(string)
	if uri == "" && fileID == "" {
		return nil
	}
	mime, _ := body["mimeType"].(string)
	if mime == "" {
		mime, _ = body["mime_type"].(string)
	}
	name, _ := body["name"].(string)
	kind := "file"
	for _, k := range []string{"image", "audio", "video"} {
		if strings.HasPrefix(mime, k+"/") {
			kind = k
		}
	}
	return attachment(kind, uri, mime, name)
}

// attachment is one entry, nil without a uri or a name.
func attachment(kind, uri, mime, name string) map[string]any {
	if uri == "" && name == "" {
		return nil
	}
	a := map[string]any{"kind": kind}
	for k, v := range map[string]string{"uri": uri, "mime_type": mime, "name": name} {
		if v != "" {
			a[k] = v
		}
	}
	return a
}

// nullIfEmpty is a nullable text column: nil for "".
func nullIfEmpty(v string) any {
	if v == "" {
		return nil
	}
	return v
}
