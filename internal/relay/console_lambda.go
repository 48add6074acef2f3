//go:build lambda.norpc

package relay

import "fmt"

// ServeConsole refuses MOLECULE_CONSOLE_LISTEN in a Lambda build: a
// function serves no page (console.go).
func (rt *Runtime) ServeConsole() (url string, stop func(), err error) {
	if rt.Cfg.ConsoleListen != "" {
		return "", nil, fmt.Errorf("MOLECULE_CONSOLE_LISTEN %s: this binary is a Lambda build (tag lambda.norpc) without the console; unset it, or run molecule-relay console against its NATS", rt.Cfg.ConsoleListen)
	}
	return "", func() {}, nil
}
