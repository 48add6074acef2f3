package handler

// Structured answers of the exec: and http: handlers: instead of plain
// text, a handler that opted in answers one JSON object with text,
// attachments and whether to reply at all (docs/handlers.md "Structured answers").

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
)

// AnswerContentType is the media type an http: handler's server answers
// with to send a structured answer without Options.AnswerJSON.
const AnswerContentType = "application/vnd.molecule.answer+json"

// answerForm is how an error names the expected shape.
const answerForm = `{"text": "...", "attachments": [{"uri": "...", "name": "...", "mime_type": "...", "size": 0}], "reply": true}`

// answerJSON is the wire form of a structured answer. Pointers tell a
// missing key from an empty one.
type answerJSON struct {
	Text        *string          `json:"text"`
	Attachments []AttachmentJSON `json:"attachments"`
	Reply       *bool            `json:"reply"`
}

// DecodeStrictJSON decodes exactly one JSON value from r into v, refusing
// keys v does not have: what a handler or an agent sends the relay is
// checked, not guessed at.
func DecodeStrictJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.Decode(new(json.RawMessage)) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	return err
}

// ParseAnswer decodes a structured answer. Empty input means no reply;
// anything else must be exactly one JSON object of the documented shape
// (unknown keys are refused, so a typo is not silently dropped), and
// every attachment needs uri and name. Errors match ErrPermanent: the
// output is never posted as text instead.
func ParseAnswer(data []byte) (Answer, error) {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return Answer{NoReply: true}, nil
	}
	var a answerJSON
	if err := DecodeStrictJSON(bytes.NewReader(data), &a); err != nil {
		return Answer{}, fmt.Errorf("%w: structured answer is not valid: %v; answer one JSON object like %s", ErrPermanent, err, answerForm)
	}
	out := Answer{NoReply: a.Reply != nil && !*a.Reply}
	if a.Text != nil {
		out.Text = *a.Text
	}
	for i, at := range a.Attachments {
		if at.URI == "" || at.Name == "" || at.Size < 0 {
			return Answer{}, fmt.Errorf("%w: structured answer: attachments[%d] needs a uri and a name (and a size >= 0)", ErrPermanent, i)
		}
		out.Attachments = append(out.Attachments, at.Attachment())
	}
	if a.Text == nil && len(out.Attachments) == 0 && !out.NoReply {
		return Answer{}, fmt.Errorf("%w: structured answer has neither \"text\" nor \"attachments\" (say \"reply\": false for no reply); answer like %s", ErrPermanent, answerForm)
	}
	return out, nil
}

// isAnswerType says whether a Content-Type is AnswerContentType.
func isAnswerType(ctype string) bool {
	mt, _, err := mime.ParseMediaType(ctype)
	return err == nil && mt == AnswerContentType
}

// textOf is the text Handle returns for an answer ("" for no reply).
func textOf(a Answer, err error) (string, error) {
	if err != nil || a.NoReply {
		return "", err
	}
	return a.Text, nil
}

// looksLikeAnswer says whether out is a valid structured answer with at
// least one of its keys: output a text-mode handler probably meant as one.
func looksLikeAnswer(out string) bool {
	out = strings.TrimSpace(out)
	if !strings.HasPrefix(out, "{") {
		return false
	}
	_, err := ParseAnswer([]byte(out))
	return err == nil
}
