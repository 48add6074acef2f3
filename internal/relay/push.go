package relay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/ingress"
)

// ServePush starts the push ingress when MOLECULE_PUSH_LISTEN is set: one
// listener on that address, with one ingress.Handler per workspace at
// ingress.PathPrefix + its secret (ingress.SecretFromToken of the
// workspace token); every other path answers 404. It returns each
// workspace's push URL (MOLECULE_PUSH_URL + path, for
// poller.Config.Push) and a function that shuts the server down, waiting
// up to 5 seconds for requests in flight. Without MOLECULE_PUSH_LISTEN it
// returns no URLs and a no-op. The URLs hold the secrets: never log them.
func (rt *Runtime) ServePush(ctx context.Context) (urls map[string]string, stop func(), err error) {
	if rt.Cfg.PushListen == "" {
		return nil, func() {}, nil
	}
	log := rt.Log.With("stage", "ingress")
	mux := http.NewServeMux()
	urls = map[string]string{}
	for _, w := range rt.Cfg.Workspaces() {
		secret := ingress.SecretFromToken(w.Token)
		h, err := ingress.New(ingress.Config{JS: rt.Conn.JS, WorkspaceID: w.ID, Secret: secret, Logger: log})
		if err != nil {
			return nil, nil, fmt.Errorf("push ingress for workspace %s: %w", w.ID, err)
		}
		mux.Handle(ingress.PathPrefix+secret, h) // exact path; the handler checks the method
		urls[w.ID] = ingress.URL(rt.Cfg.PushURL, secret)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", rt.Cfg.PushListen)
	if err != nil {
		return nil, nil, fmt.Errorf("MOLECULE_PUSH_LISTEN %s: %w", rt.Cfg.PushListen, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("push ingress stopped", "err", err)
		}
	}()
	log.Info("push ingress listening; workspaces are registered in push mode", "addr", ln.Addr().String(),
		"public_base", rt.Cfg.PushURL, "workspaces", len(urls))
	return urls, func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}, nil
}
