package config

import (
	"fmt"
	"net"

	"github.com/molecule-ai/molecule-relay/internal/configerr"
)

// DefaultConcurrency is how many messages a stage works on at once when
// MOLECULE_CONCURRENCY or MOLECULE_REPLY_CONCURRENCY is not set: the
// stages' own default (stage.DefaultConcurrency; a test of this package
// holds the two equal), written here so that the configuration depends on
// nothing above it.
const DefaultConcurrency = 16

// Settings are the agent API's environment variables (internal/agentapi,
// where they are agentapi.Settings), embedded in Config.
type Settings struct {
	// AgentAPIListen is the loopback address the API listens on; "off"
	// turns the API off. Default 127.0.0.1:0 (a free port).
	AgentAPIListen string `env:"MOLECULE_AGENT_API_LISTEN" envDefault:"127.0.0.1:0"`
	// AgentAPISecrets lets handlers read the workspace's secrets through
	// the API. Default false: GET /v1/secrets answers 403.
	AgentAPISecrets bool `env:"MOLECULE_AGENT_API_SECRETS"`
}

// Off says whether the API is turned off.
func (s Settings) Off() bool { return s.AgentAPIListen == "off" }

// Validate checks that the listen address is loopback (or "off"). Its
// errors match agentapi.ErrInvalidConfig.
func (s Settings) Validate() error {
	if s.Off() || s.AgentAPIListen == "" {
		return nil
	}
	return CheckLoopback(s.AgentAPIListen)
}

// errAgentAPI is agentapi.ErrInvalidConfig (configerr.For is a value).
var errAgentAPI = configerr.For("agentapi")

// CheckLoopback refuses an agent API address other processes on the
// network could reach: the API hands out the workspace's powers to
// whoever holds a capability token, so only this host may connect.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: MOLECULE_AGENT_API_LISTEN %q: %v; use 127.0.0.1:<port>", errAgentAPI, addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: MOLECULE_AGENT_API_LISTEN %q is not a loopback IP address; use 127.0.0.1:<port> (or [::1]:<port>): the agent API must not be reachable from other hosts", errAgentAPI, addr)
	}
	return nil
}
