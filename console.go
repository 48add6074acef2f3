//go:build !lambda.norpc

package relay

import (
	"net/http"

	"github.com/molecule-ai/molecule-relay/internal/console"
)

// Console is the operator console of this relay's NATS as an http.Handler,
// for a Go program to mount on its own server (docs/console.md). It takes
// its options from the configuration: MOLECULE_CONSOLE_TOKEN (required on
// every request when set), MOLECULE_CONSOLE_READ_ONLY. The program's
// server decides the address; serve it beyond loopback only with a token.
func (r *Relay) Console() (http.Handler, error) {
	return console.New(r.rt.Conn.JS, r.rt.Topo, r.rt.ConsoleOptions())
}
