package molecule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/internal/jsonread"
)

// ErrMalformedRow is matched by every error ParseRow returns.
var ErrMalformedRow = errors.New("molecule: malformed activity row")

// RowError is the error ParseRow returns. It matches ErrMalformedRow and
// the underlying cause with errors.Is; ID lets a poller report which row
// it skipped without parsing the message.
type RowError struct {
	// ID is the row's id, or "" when it could not be read.
	ID string
	// Err says what is wrong, naming the offending field.
	Err error
}

// Error reads "molecule: malformed activity row <id>: <what>". The id is
// quoted when it holds anything but letters, digits and "-_.:", and cut
// to 64 bytes, so a hostile row cannot forge log lines.
func (e *RowError) Error() string {
	if e.ID == "" {
		return fmt.Sprintf("%v: %v", ErrMalformedRow, e.Err)
	}
	return fmt.Sprintf("%v %s: %v", ErrMalformedRow, displayID(e.ID), e.Err)
}

// Unwrap returns ErrMalformedRow and the cause.
func (e *RowError) Unwrap() []error { return []error{ErrMalformedRow, e.Err} }

// RowKind says what an a2a_receive row is.
type RowKind int

const (
	// KindMessage is an inbound message (canvas user, cron, peer, self).
	KindMessage RowKind = iota
	// KindOwnNotify is the agent's own /notify output (method "notify");
	// a poller must skip it, or it replies to itself forever.
	KindOwnNotify
	// KindUpload is a chat upload manifest (method "chat_upload_receive").
	KindUpload
	// KindBroadcast is a broadcast_receive row (2026-08): a message another
	// workspace of the org sent to every agent of it, with no request_body;
	// its text is the summary, "Broadcast from <sender>: <message cut at
	// 120 runes>" (docs/protocol.md, "Broadcasts").
	KindBroadcast
)

// Sender classifies a row by source_id only (never by method).
type Sender int

const (
	// SenderCanvasUser: source_id null.
	SenderCanvasUser Sender = iota
	// SenderCron: source_id null and messageId prefix "cron-".
	SenderCron
	// SenderSelf: source_id equals the agent's own workspace id.
	SenderSelf
	// SenderPeer: any other source_id.
	SenderPeer
)

// Reasons returned by Message.Skip.
const (
	// SkipOwnNotify: the row is the agent's own /notify output.
	SkipOwnNotify = "own_notify"
	// SkipUpload: the row is a chat upload manifest, not a message.
	SkipUpload = "upload"
	// SkipSelf: the row is a message the agent sent to itself.
	SkipSelf = "self"
)

// Message is a parsed activity row.
type Message struct {
	ActivityID   string
	WorkspaceID  string
	ActivityType string
	Method       string
	Summary      string
	Status       string
	// SourceID is "" for a null source_id.
	SourceID string
	TargetID string
	Kind     RowKind
	Sender   Sender
	// Text is joined from the text parts (docs/protocol.md §5 with fallbacks).
	// For a KindOwnNotify row it is response_body.result, the text the
	// agent posted, so a caller can show it.
	Text string
	// Attachments are the file parts of the message (for a KindOwnNotify
	// row, of response_body.parts; for a KindUpload row, the manifest
	// itself), followed by any top-level attachments[] enrichment entry
	// with a URI not already listed.
	Attachments []Attachment
	// MessageID and Role are params.message.messageId and .role.
	MessageID string
	Role      string
	// InReplyTo is params.message.metadata.in_reply_to.
	InReplyTo string
	// Hops is params.message.metadata.relay_hops (0 when absent).
	Hops int
	// InReplyToMessageID is params.message.metadata.in_reply_to_message_id:
	// the messageId of the message this one answers, which a relay sets on
	// its replies so an asking agent can match the answer to its question
	// (the platform's activity id of the question is unknown to the asker).
	InReplyToMessageID string
	// ContextID and TaskID are the A2A params.message.contextId and taskId.
	ContextID string
	TaskID    string
	// History is params.metadata.history, the sender's own list of the
	// conversation's earlier turns (the canvas sends it); nil when absent
	// or unreadable.
	History   []HistoryTurn
	CreatedAt time.Time
	// Seq is the row's seq (2026-08 platforms), 0 when it has none.
	Seq int64
	// Enrichment (include=peer_info on 2026-08 platforms).
	PeerName     string
	PeerRole     string
	AgentCardURL string
	// Raw is the row as received.
	Raw json.RawMessage
}

// Skip says whether a poller should skip m rather than deliver it, and
// why: SkipOwnNotify for the agent's own /notify output, SkipUpload for a
// chat upload manifest, SkipSelf for a self-message when allowSelf is
// false, and "" to deliver. It only advises: the caller decides, and
// advances its cursor past skipped rows either way (docs/protocol.md §5).
func (m *Message) Skip(allowSelf bool) (reason string) {
	switch {
	case m.Kind == KindOwnNotify:
		return SkipOwnNotify
	case m.Kind == KindUpload:
		return SkipUpload
	case m.Sender == SenderSelf && !allowSelf:
		return SkipSelf
	}
	return ""
}

// ParseRow parses one activity row. self is the agent's own workspace id,
// used to classify self-messages. A malformed row yields an error matching
// ErrMalformedRow that names the row id when it can be read; ParseRow never
// panics.
//
// It is strict about what decides identity, routing and content: the row
// must be an object with a non-empty string id and an RFC 3339 created_at;
// every string column it reads must be a string or null; and request_body,
// params, params.message, its metadata, parts arrays, each part, a text
// part's text and a file part's fields must have the type the protocol
// gives them (or be null/absent). It is lenient where the platform is:
// unknown keys, absent columns other than id and created_at, an absent
// request_body, relay_hops or size that is not a non-negative integer
// (ignored), and malformed include=peer_info enrichment (ignored).
func ParseRow(raw json.RawMessage, self string) (*Message, error) {
	m, id, err := parseRow(raw, self)
	if err != nil {
		return nil, &RowError{ID: id, Err: err}
	}
	return m, nil
}

// Parse parses the row like ParseRow(r.JSON, self), without checking
// again that a row Activity read is valid JSON (its page was checked).
func (r ActivityRow) Parse(self string) (*Message, error) {
	if !r.valid || jsonKind(r.JSON) != '{' {
		return ParseRow(r.JSON, self)
	}
	m, id, err := parseRowObject(splitObject(r.JSON), r.JSON, self)
	if err != nil {
		return nil, &RowError{ID: id, Err: err}
	}
	return m, nil
}

// jsonKind is the type of a valid raw JSON value, read from its first byte.
func jsonKind(v json.RawMessage) byte {
	v = bytes.TrimLeft(v, " \t\r\n")
	if len(v) == 0 {
		return 0
	}
	switch c := v[0]; c {
	case '{', '[', '"', 'n', 't', 'f':
		return c
	default:
		return '0' // a number
	}
}

func kindName(k byte) string {
	switch k {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case '0':
		return "a number"
	}
	return "null"
}

// object returns o[key] as an object; nil (no error) when absent or null.
func (o rawObject) object(key, path string) (rawObject, error) {
	v, ok := o.get(key)
	if !ok {
		return nil, nil
	}
	switch k := jsonKind(v); k {
	case 'n':
		return nil, nil
	case '{':
		return splitObject(v), nil
	default:
		return nil, fmt.Errorf("%s: want an object, got %s", path, kindName(k))
	}
}

// array returns o[key] as an array; present is false when absent or null.
func (o rawObject) array(key, path string) (elems []json.RawMessage, present bool, err error) {
	v, ok := o.get(key)
	if !ok {
		return nil, false, nil
	}
	switch k := jsonKind(v); k {
	case 'n':
		return nil, false, nil
	case '[':
		return splitArray(v), true, nil
	default:
		return nil, false, fmt.Errorf("%s: want an array, got %s", path, kindName(k))
	}
}

// str returns o[key] as a string; "" when absent or null.
func (o rawObject) str(key, path string) (string, error) {
	s, _, err := o.strOK(key, path)
	return s, err
}

// strOK is str that also says whether the value was a string (not null).
func (o rawObject) strOK(key, path string) (s string, isString bool, err error) {
	v, ok := o.get(key)
	if !ok {
		return "", false, nil
	}
	switch k := jsonKind(v); k {
	case 'n':
		return "", false, nil
	case '"':
		return unquote(bytes.TrimSpace(v)), true, nil
	default:
		return "", false, fmt.Errorf("%s: want a string, got %s", path, kindName(k))
	}
}

// strIs says whether str(key, key) would be want, without allocating
// for a plain literal.
func (o rawObject) strIs(key, want string) (bool, error) {
	v, ok := o.get(key)
	if !ok {
		return want == "", nil
	}
	switch k := jsonKind(v); k {
	case 'n':
		return want == "", nil
	case '"':
		lit := bytes.TrimSpace(v)
		if jsonread.PlainASCII(lit) {
			return string(lit[1:len(lit)-1]) == want, nil
		}
		return unquote(lit) == want, nil
	default:
		return false, fmt.Errorf("%s: want a string, got %s", key, kindName(k))
	}
}

// lenientStr returns o[key] if it is a string, else "".
func (o rawObject) lenientStr(key string) string {
	s, err := o.str(key, key)
	if err != nil {
		return ""
	}
	return s
}

// nonNegInt reads o[key] as a non-negative integer no larger than max;
// ok is false for anything else (absent, wrong type, fractional, negative).
func (o rawObject) nonNegInt(key string, max int64) (n int64, ok bool) {
	v, present := o.get(key)
	if !present || jsonKind(v) != '0' {
		return 0, false
	}
	num := json.Number(bytes.TrimSpace(v)) // a valid number literal, as json.Unmarshal would give it
	if i, err := strconv.ParseInt(num.String(), 10, 64); err == nil {
		if i < 0 || i > max {
			return 0, false
		}
		return i, true
	}
	// 2.0 and 1e3 are integers too.
	f, err := num.Float64()
	if err != nil || f < 0 || f > float64(max) || f != math.Trunc(f) {
		return 0, false
	}
	return int64(f), true
}

// maxHops bounds relay_hops so it always fits an int.
const maxHops = math.MaxInt32

func parseRow(raw json.RawMessage, self string) (m *Message, id string, err error) {
	row, err := decodeRowObject(raw)
	if err != nil {
		return nil, "", err
	}
	return parseRowObject(row, append(json.RawMessage(nil), raw...), self)
}

// parseRowObject parses a row split into row; raw is kept as Message.Raw.
func parseRowObject(row rawObject, raw json.RawMessage, self string) (m *Message, id string, err error) {
	id, err = row.str("id", "id")
	if err != nil {
		return nil, "", err
	}
	if id == "" {
		return nil, "", errors.New("id is missing or empty")
	}

	m = &Message{ActivityID: id, Raw: raw}
	if err := m.readColumns(row); err != nil {
		return nil, id, err
	}
	if err := m.readContent(row); err != nil {
		return nil, id, err
	}
	m.Sender = senderOf(m.SourceID, m.MessageID, self)
	m.addEnrichedAttachments(row)
	return m, id, nil
}

// decodeRowObject decodes one feed row, which must be a JSON object. It
// validates the row once; below it, the row is only split (rawjson.go).
func decodeRowObject(raw json.RawMessage) (rawObject, error) {
	if k := jsonKind(raw); k != '{' {
		if !json.Valid(raw) {
			return nil, errors.New("not valid JSON")
		}
		return nil, fmt.Errorf("want a JSON object, got %s", kindName(k))
	}
	if !json.Valid(raw) {
		var row map[string]json.RawMessage
		err := json.Unmarshal(raw, &row) // for its description of the fault
		return nil, fmt.Errorf("not valid JSON: %w", err)
	}
	return splitObject(raw), nil
}

// readColumns reads the row's top-level columns: the string fields,
// created_at, the advisory enrichment and, from the method, the Kind.
func (m *Message) readColumns(row rawObject) error {
	var err error
	for _, f := range []struct {
		key string
		dst *string
	}{
		{"workspace_id", &m.WorkspaceID},
		{"activity_type", &m.ActivityType},
		{"source_id", &m.SourceID},
		{"target_id", &m.TargetID},
		{"method", &m.Method},
		{"summary", &m.Summary},
		{"status", &m.Status},
	} {
		if *f.dst, err = row.str(f.key, f.key); err != nil {
			return err
		}
	}

	created, isString, err := row.strOK("created_at", "created_at")
	if err != nil {
		return err
	}
	if !isString {
		return errors.New("created_at is missing")
	}
	if m.CreatedAt, err = time.Parse(time.RFC3339Nano, created); err != nil {
		return fmt.Errorf("created_at %s: %w", quoteCut(created), err)
	}

	// Enrichment is advisory: a wrong type is ignored, not an error.
	if v, ok := row.get("seq"); ok {
		m.Seq = seqValue(v)
	}
	m.PeerName = row.lenientStr("peer_name")
	m.PeerRole = row.lenientStr("peer_role")
	m.AgentCardURL = row.lenientStr("agent_card_url")

	switch {
	case m.ActivityType == "broadcast_receive":
		m.Kind = KindBroadcast
	case m.Method == "notify":
		m.Kind = KindOwnNotify
	case m.Method == "chat_upload_receive":
		m.Kind = KindUpload
	default:
		m.Kind = KindMessage
	}
	return nil
}

// readContent reads the text, attachments and message fields by Kind:
// an own notify from response_body, an upload from its file fields, a
// message from its JSON-RPC request_body.
func (m *Message) readContent(row rawObject) error {
	body, err := row.object("request_body", "request_body")
	if err != nil {
		return err
	}
	var msg rawObject
	switch m.Kind {
	case KindOwnNotify:
		if err := m.readNotify(row); err != nil {
			return err
		}
	case KindUpload:
		if body != nil {
			a, ok, err := fileFields(body, "request_body")
			if err != nil {
				return err
			}
			if ok {
				m.Attachments = append(m.Attachments, a)
			}
		}
		m.Text = m.Summary
	default:
		if msg, err = m.readBody(body); err != nil {
			return err
		}
	}
	// A notify or upload row may still carry a JSON-RPC body; read its
	// message fields the same way (readBody already did, for a message).
	if msg == nil && body != nil && m.Kind != KindMessage {
		params, err := body.object("params", "request_body.params")
		if err != nil {
			return err
		}
		if params != nil {
			m.History = parseHistory(params)
			if msg, err = params.object("message", "request_body.params.message"); err != nil {
				return err
			}
		}
	}
	return m.readMessageFields(msg)
}

// senderOf classifies the sender by source_id only, never by method
// (docs/protocol.md §5). An empty string is treated like null: it is not a
// workspace id.
func senderOf(sourceID, messageID, self string) Sender {
	switch {
	case sourceID == "":
		if strings.HasPrefix(messageID, "cron-") {
			return SenderCron
		}
		return SenderCanvasUser
	case self != "" && strings.EqualFold(sourceID, self):
		return SenderSelf
	default:
		return SenderPeer
	}
}

// readNotify reads an own-notify row: response_body {"result": text,
// "parts"?: [file parts]}.
func (m *Message) readNotify(row rawObject) error {
	resp, err := row.object("response_body", "response_body")
	if err != nil {
		return err
	}
	m.Text = m.Summary
	if resp == nil {
		return nil
	}
	if s, isString, err := resp.strOK("result", "response_body.result"); err == nil && isString {
		m.Text = s
	}
	parts, _, err := resp.array("parts", "response_body.parts")
	if err != nil {
		return err
	}
	_, files, err := scanParts(parts, "response_body.parts")
	if err != nil {
		return err
	}
	m.Attachments = append(m.Attachments, files...)
	return nil
}

// readBody extracts text and attachments of an inbound message row and
// returns params.message (nil if absent).
//
// Text: the first of params.message.parts, params.parts and a top-level
// parts whose text parts (kind or type "text") join to a non-empty string;
// parts are joined with "" in order, as T does (extract-text.ts), not
// with "\n" as the canvas joins reply parts. If none has text, Text is the
// summary, unless the message had file parts: an attachment-only message
// keeps an empty Text rather than a summary such as "message/send → ext-A
// (queued for poll)", which would read as something the user typed.
// Attachments come from the first of the same candidates that has file
// parts. params.metadata.history (the canvas's prior turns) goes to
// History, read tolerantly (parseHistory): it never rejects the row.
func (m *Message) readBody(body rawObject) (msg rawObject, err error) {
	type candidate struct {
		parts   []json.RawMessage
		present bool
		path    string
	}
	// At most three candidates: sized up front, the slice stays on the
	// stack instead of growing on the heap (up to three allocations a row).
	cands := make([]candidate, 0, 3)
	if body != nil {
		params, err := body.object("params", "request_body.params")
		if err != nil {
			return nil, err
		}
		if params != nil {
			m.History = parseHistory(params)
			if msg, err = params.object("message", "request_body.params.message"); err != nil {
				return nil, err
			}
			if msg != nil {
				p, ok, err := msg.array("parts", "request_body.params.message.parts")
				if err != nil {
					return nil, err
				}
				cands = append(cands, candidate{p, ok, "request_body.params.message.parts"})
			}
			p, ok, err := params.array("parts", "request_body.params.parts")
			if err != nil {
				return nil, err
			}
			cands = append(cands, candidate{p, ok, "request_body.params.parts"})
		}
		p, ok, err := body.array("parts", "request_body.parts")
		if err != nil {
			return nil, err
		}
		cands = append(cands, candidate{p, ok, "request_body.parts"})
	}

	textFound, filesFound := false, false
	for _, c := range cands {
		if !c.present {
			continue
		}
		text, files, err := scanParts(c.parts, c.path)
		if err != nil {
			return nil, err
		}
		if !textFound && text != "" {
			m.Text, textFound = text, true
		}
		if !filesFound && len(files) > 0 {
			m.Attachments, filesFound = append(m.Attachments, files...), true
		}
	}
	if !textFound && !filesFound {
		m.Text = m.Summary
	}
	return msg, nil
}

// readMessageFields reads messageId, role, contextId, taskId and
// metadata.in_reply_to / in_reply_to_message_id / relay_hops of
// params.message.
func (m *Message) readMessageFields(msg rawObject) error {
	if msg == nil {
		return nil
	}
	const p = "request_body.params.message"
	var err error
	if m.MessageID, err = msg.str("messageId", p+".messageId"); err != nil {
		return err
	}
	if m.Role, err = msg.str("role", p+".role"); err != nil {
		return err
	}
	if m.ContextID, err = msg.str("contextId", p+".contextId"); err != nil {
		return err
	}
	if m.TaskID, err = msg.str("taskId", p+".taskId"); err != nil {
		return err
	}
	meta, err := msg.object("metadata", p+".metadata")
	if err != nil || meta == nil {
		return err
	}
	// in_reply_to guards against reply loops: a wrong type is an error,
	// not silently "not a reply".
	if m.InReplyTo, err = meta.str("in_reply_to", p+".metadata.in_reply_to"); err != nil {
		return err
	}
	if m.InReplyToMessageID, err = meta.str("in_reply_to_message_id", p+".metadata.in_reply_to_message_id"); err != nil {
		return err
	}
	if n, ok := meta.nonNegInt("relay_hops", maxHops); ok {
		m.Hops = int(n)
	}
	return nil
}

// scanParts joins the text of text parts and collects file parts. A
// part's path (for an error) is spelled out only when it is needed: this
// runs for every message relayed.
func scanParts(parts []json.RawMessage, path string) (text string, files []Attachment, err error) {
	texts := make([]string, 0, 4)
	for i, raw := range parts {
		if k := jsonKind(raw); k != '{' {
			return "", nil, fmt.Errorf("%s: want an object, got %s", partPath(path, i), kindName(k))
		}
		part := splitObject(raw)
		isText, isFile, err := partKind(part)
		if err != nil {
			return "", nil, fmt.Errorf("%s.%w", partPath(path, i), err)
		}
		switch {
		case isText:
			t, err := part.str("text", "text")
			if err != nil {
				return "", nil, fmt.Errorf("%s.%w", partPath(path, i), err)
			}
			texts = append(texts, t)
		case isFile:
			a, ok, err := filePart(part, partPath(path, i))
			if err != nil {
				return "", nil, err
			}
			if ok {
				files = append(files, a)
			}
		}
	}
	return strings.Join(texts, ""), files, nil
}

func partPath(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// partKind reads a part's "kind" (A2A) and "type" (older senders): text
// when either says "text", else file when either says "file". Either one
// present but not a string (nor null) is an error, "kind" checked first.
func partKind(part rawObject) (isText, isFile bool, err error) {
	var kindIs, typeIs [2]bool // "text", "file"
	for i, want := range [2]string{"text", "file"} {
		if kindIs[i], err = part.strIs("kind", want); err != nil {
			return false, false, err
		}
		if typeIs[i], err = part.strIs("type", want); err != nil {
			return false, false, err
		}
	}
	isText = kindIs[0] || typeIs[0]
	return isText, !isText && (kindIs[1] || typeIs[1]), nil
}

// filePart reads {"kind":"file","file":{...}} or the flat
// {"kind":"file","uri",...}. A part with neither uri nor name is dropped
// (ok false), as the platform's own projection does.
func filePart(part rawObject, path string) (Attachment, bool, error) {
	inner, err := part.object("file", path+".file")
	if err != nil {
		return Attachment{}, false, err
	}
	if inner != nil {
		return fileFields(inner, path+".file")
	}
	return fileFields(part, path)
}

// fileFields reads uri, name, mimeType (or mime_type) and size.
func fileFields(o rawObject, path string) (Attachment, bool, error) {
	var a Attachment
	var err error
	if a.URI, err = o.str("uri", path+".uri"); err != nil {
		return a, false, err
	}
	if a.Name, err = o.str("name", path+".name"); err != nil {
		return a, false, err
	}
	if a.MimeType, err = o.str("mimeType", path+".mimeType"); err != nil {
		return a, false, err
	}
	if a.MimeType == "" {
		if a.MimeType, err = o.str("mime_type", path+".mime_type"); err != nil {
			return a, false, err
		}
	}
	if n, ok := o.nonNegInt("size", math.MaxInt64); ok {
		a.Size = n
	}
	return a, a.URI != "" || a.Name != "", nil
}

// addEnrichedAttachments appends include=peer_info attachments[] entries
// ({kind, uri, name, mime_type}) whose URI is not listed yet. The platform
// projects them from the same parts, so they are usually duplicates;
// malformed entries are ignored.
func (m *Message) addEnrichedAttachments(row rawObject) {
	elems, _, err := row.array("attachments", "attachments")
	if err != nil {
		return
	}
	for _, raw := range elems {
		if jsonKind(raw) != '{' {
			continue
		}
		o := splitObject(raw)
		a, ok, err := filePart(o, "attachments")
		if err != nil || !ok {
			continue
		}
		dup := false
		for _, have := range m.Attachments {
			if have.URI == a.URI && (a.URI != "" || have.Name == a.Name) {
				dup = true
				break
			}
		}
		if !dup {
			m.Attachments = append(m.Attachments, a)
		}
	}
}

// displayID renders a row id for an error message.
func displayID(id string) string {
	safe := len(id) <= 64
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' || r == ':') {
			safe = false
			break
		}
	}
	if safe {
		return id
	}
	return quoteCut(id)
}

// quoteCut quotes s, cut to 64 bytes (on a rune boundary) with "…".
func quoteCut(s string) string {
	const max = 64
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}
