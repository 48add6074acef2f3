//go:build !lambda.norpc

package relay

import (
	"github.com/molecule-ai/molecule-relay/internal/console"
)

// ServeConsole serves the operator console (internal/console) on
// MOLECULE_CONSOLE_LISTEN when it is set, with this process's rate
// budgets; url is its address and stop shuts it down. With no address
// it does nothing.
func (rt *Runtime) ServeConsole() (url string, stop func(), err error) {
	if rt.Cfg.ConsoleListen == "" {
		return "", func() {}, nil
	}
	c, err := console.New(rt.Conn.JS, rt.Topo, rt.ConsoleOptions())
	if err != nil {
		return "", nil, err
	}
	url, stop, err = console.Serve(rt.Cfg.ConsoleListen, c)
	if err != nil {
		return "", nil, err
	}
	rt.Log.Info("serving the console", "url", url, "read_only", rt.Cfg.ConsoleReadOnly)
	return url, stop, nil
}

// ConsoleOptions are the console's options from the configuration, with
// what this process knows of its workspaces (their rate budgets; the
// event stream's health is in the status record, for every process).
func (rt *Runtime) ConsoleOptions() console.Options {
	o := console.Options{
		Token: rt.Cfg.ConsoleToken, ReadOnly: rt.Cfg.ConsoleReadOnly, Logger: rt.Log,
		Live: func() []console.WorkspaceLive {
			clients := rt.liveClients()
			out := make([]console.WorkspaceLive, 0, len(clients))
			for _, c := range clients {
				out = append(out, console.WorkspaceLive{WorkspaceID: c.WorkspaceID(), RateLimit: c.RateLimit()})
			}
			return out
		},
	}
	if rt.reg != nil {
		o.Registry = rt.reg.reg // the Workspaces view changes what this relay follows
	}
	return o
}
