package relay

import "github.com/molecule-ai/molecule-relay/internal/handler"

// SetHandler makes the dispatchers the runtime builds from now on (Run,
// Once) run h, a Go program's own handler (the root package), instead of
// the one MOLECULE_HANDLER names.
func (rt *Runtime) SetHandler(h handler.Handler) { rt.goHandler = h }
