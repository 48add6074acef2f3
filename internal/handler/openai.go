package handler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// ErrNoChoices is returned (and retried) when an openai: server answers
// without a choice.
var ErrNoChoices = errors.New("handler: openai: the response has no choices")

type openAIHandler struct {
	endpoint string
	display  string
	opts     Options
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
}

type chatResponse struct {
	Choices []struct {
		Message struct {
			Content json.RawMessage `json:"content"`
		} `json:"message"`
	} `json:"choices"`
}

// NewOpenAI returns the openai: handler for an OpenAI-compatible server
// (OpenAI, vLLM, Ollama, a hermes gateway). Each call POSTs
// {"model", "messages": [system prompt if set, the conversation's history
// (user and assistant turns), {"role":"user","content": text}]} to <base>/v1/chat/completions (a base already ending in /v1, or
// naming the full /chat/completions endpoint, is used as is) with
// "Authorization: Bearer <OpenAIAPIKey>" when a key is set. The reply is
// choices[0].message.content. 400, 401, 403 and other 4xx are permanent;
// 408, 429 and 5xx are retried (*StatusError).
func NewOpenAI(base string, opts Options) (Handler, error) {
	opts.SetDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	u, err := parseHTTPURL("openai", base)
	if err != nil {
		return nil, err
	}
	p := strings.TrimRight(u.Path, "/")
	switch {
	case strings.HasSuffix(p, "/chat/completions"):
	case strings.HasSuffix(p, "/v1"):
		p += "/chat/completions"
	default:
		p += "/v1/chat/completions"
	}
	u.Path, u.RawPath = p, ""
	return &openAIHandler{endpoint: u.String(), display: displayURL(u), opts: opts}, nil
}

func (h *openAIHandler) String() string { return "openai:" + h.display }

func (h *openAIHandler) Handle(ctx context.Context, req *Request) (string, error) {
	if req == nil || req.Message == nil {
		return "", fmt.Errorf("%w: request without a message", ErrPermanent)
	}
	cr := chatRequest{Model: h.opts.OpenAIModel}
	if h.opts.OpenAISystemPrompt != "" {
		cr.Messages = append(cr.Messages, chatMessage{Role: "system", Content: h.opts.OpenAISystemPrompt})
	}
	cr.Messages = append(cr.Messages, historyMessages(req.History)...)
	cr.Messages = append(cr.Messages, chatMessage{Role: "user", Content: req.Message.Text})
	body, err := json.Marshal(cr)
	if err != nil {
		return "", fmt.Errorf("%w: encode chat request: %v", ErrPermanent, err)
	}
	header := http.Header{}
	if h.opts.OpenAIAPIKey != "" {
		header.Set("Authorization", "Bearer "+h.opts.OpenAIAPIKey)
	}
	ctx, cancel := context.WithTimeout(ctx, h.opts.Timeout)
	defer cancel()
	stop := keepAlive(ctx, req, h.opts.ProgressInterval)
	defer stop()

	data, _, err := post(ctx, h.opts, h.endpoint, h.display, body, header)
	if err != nil {
		var se *StatusError
		if errors.As(err, &se) && h.opts.OpenAIAPIKey != "" {
			// A gateway may echo the key it refused.
			se.Message = strings.ReplaceAll(se.Message, h.opts.OpenAIAPIKey, "[redacted]")
		}
		return "", err
	}
	var resp chatResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return "", fmt.Errorf("handler: openai %s: decode response: %w", h.display, err)
	}
	if len(resp.Choices) == 0 {
		return "", fmt.Errorf("%w (%s)", ErrNoChoices, h.display)
	}
	reply, err := chatContent(resp.Choices[0].Message.Content)
	if err != nil {
		return "", fmt.Errorf("handler: openai %s: %w", h.display, err)
	}
	loggerOf(req).Debug("openai handler done", "url", h.display, "model", h.opts.OpenAIModel, "reply_bytes", len(reply))
	return strings.TrimSpace(reply), nil
}

// historyMessages turns the conversation's earlier turns into chat
// messages: the other party's as "user", ours as "assistant". A turn with
// no text (attachments only) is left out: the chat API has no place for a
// bare file.
func historyMessages(turns []Turn) []chatMessage {
	out := make([]chatMessage, 0, len(turns))
	for _, t := range turns {
		if t.Text == "" {
			continue
		}
		role := "user"
		if t.Role == RoleAgent {
			role = "assistant"
		}
		out = append(out, chatMessage{Role: role, Content: t.Text})
	}
	return out
}

// chatContent reads message.content: a string, null (no reply), or an
// array of parts whose "text" fields are joined.
func chatContent(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("message.content is neither a string nor a list of parts: %w", err)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "" || p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}
