package relay

import (
	"github.com/molecule-ai/molecule-relay/internal/config"
	"github.com/molecule-ai/molecule-relay/internal/configerr"
	"github.com/molecule-ai/molecule-relay/internal/delegate"
	"github.com/molecule-ai/molecule-relay/internal/handler"
)

// Config is a relay's whole configuration, as LoadConfig reads it from the
// environment (README "Configuration" lists every variable).
type Config = config.Config

// Flags are the command-line flags that override their variables; nil
// in LoadConfig reads the environment alone.
type Flags = config.Flags

// Requirement says what a command needs configured (Config.Validate).
type Requirement = config.Requirement

const (
	// NeedPlatform: a platform URL and at least one workspace with a token.
	NeedPlatform = config.NeedPlatform
	// NeedHandler: a handler spec (MOLECULE_HANDLER).
	NeedHandler = config.NeedHandler
)

// LoadConfig reads the configuration from environ (KEY=VALUE entries, as
// os.Environ returns them), with flags overriding their variables. A bad
// value is an error that matches ErrInvalidConfig and names the variable.
func LoadConfig(flags *Flags, environ []string) (*Config, error) {
	return config.Load(flags, environ)
}

// ErrInvalidConfig is matched (errors.Is) by every configuration error of
// the relay, whichever part found it.
var ErrInvalidConfig = configerr.ErrInvalid

// ErrNoAnswer is returned by a handler's AskPeer when the peer did not
// answer within the question's timeout.
var ErrNoAnswer = delegate.ErrNoAnswer

// SetHandler makes the dispatchers the runtime builds from now on (Run,
// Once) run h, a Go program's own handler (the root package), instead of
// the one MOLECULE_HANDLER names.
func (rt *Runtime) SetHandler(h handler.Handler) { rt.goHandler = h }
