package handler

// How the exec: and http: handlers reach the relay's agent API: the
// per-message URL and capability token, in the program's environment and
// in the payload. Never the workspace token.

// Environment variables an exec: program gets while the agent API serves
// its message.
const (
	// EnvAgentAPI is the agent API's base URL (http://127.0.0.1:port).
	EnvAgentAPI = "MOLECULE_AGENT_API"
	// EnvAgentToken is the message's capability token, sent as
	// "Authorization: Bearer <token>"; it dies with the handler call.
	EnvAgentToken = "MOLECULE_AGENT_TOKEN"
)

// AgentEndpoint is implemented by an Agent the relay also serves over
// HTTP: the exec: and http: handlers hand its URL and token to the
// program or server they call.
type AgentEndpoint interface {
	Endpoint() (url, token string)
}

// AgentAPIRef is the payload's "agent_api": where the handler reaches the
// agent API for this message, and with which capability token.
type AgentAPIRef struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// agentRef is req's AgentAPIRef, or nil when its Agent serves no HTTP API.
func agentRef(req *Request) *AgentAPIRef {
	if req == nil {
		return nil
	}
	e, ok := req.Agent.(AgentEndpoint)
	if !ok {
		return nil
	}
	url, token := e.Endpoint()
	if url == "" || token == "" {
		return nil
	}
	return &AgentAPIRef{URL: url, Token: token}
}

// agentEnv is the environment entries that tell an exec: program about
// the agent API, or nil.
func agentEnv(req *Request) []string {
	ref := agentRef(req)
	if ref == nil {
		return nil
	}
	return []string{EnvAgentAPI + "=" + ref.URL, EnvAgentToken + "=" + ref.Token}
}
