package relay

import (
	"github.com/molecule-ai/molecule-relay/internal/agentapi"
	"github.com/molecule-ai/molecule-relay/internal/dispatcher"
	"github.com/molecule-ai/molecule-relay/pkg/events"
)

// agentAPI starts the agent API on the first call and returns it for the
// dispatcher (nil when MOLECULE_AGENT_API_LISTEN=off). Its platform calls
// use the runtime's clients; a process without a workspace's token (a
// Lambda dispatcher) gets 503 from those endpoints. Close stops it.
func (rt *Runtime) agentAPI() (dispatcher.AgentAPI, error) {
	rt.agentMu.Lock()
	defer rt.agentMu.Unlock()
	if rt.Cfg.Settings.Off() {
		return nil, nil
	}
	if rt.agentSrv == nil {
		srv, err := agentapi.New(agentapi.Config{
			Listen:  rt.Cfg.AgentAPIListen,
			Clients: rt.startClients(),
			Lookup:  rt.lookup(),
			Files:   rt.FileCache(),
			Records: rt.Topo.Handled,
			Secrets: rt.Cfg.AgentAPISecrets,
			Asker:   rt.agentAsker(), // internal/delegate, through asker.go
			Logger:  rt.Log.With("stage", "agentapi"),
			LoopGuard: func(in *events.Inbound) string {
				return dispatcher.LoopGuard(in, rt.Cfg.ReplyToReplies, rt.Cfg.MaxHops)
			},
			BeforeNotify: func(ws, text string) {
				if l := rt.ledger; l != nil {
					l.Note(ws, text)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		rt.agentSrv = srv
	}
	return rt.agentSrv, nil
}

// closeAgentAPI stops the agent API if it was started.
func (rt *Runtime) closeAgentAPI() {
	rt.agentMu.Lock()
	defer rt.agentMu.Unlock()
	if rt.agentSrv != nil {
		_ = rt.agentSrv.Close()
		rt.agentSrv = nil
	}
}
