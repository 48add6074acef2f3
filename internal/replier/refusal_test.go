package replier

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/events"
	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// Every refusal of POST /workspaces/:id/a2a and POST /workspaces/:id/notify
// listed in docs/protocol.md §6, sent by the double over real HTTP and read by the real client, is
// classified as retry, retry-after or dead-letter with a reason. Before,
// 503 "workspace has no URL" (no code field) was "outcome unknown" and
// retried until max deliveries.
func TestRefusalTable(t *testing.T) {
	t.Parallel()
	plat := moleculetest.NewServer()
	t.Cleanup(plat.Close)
	a, b := plat.CreateWorkspace("A"), plat.CreateWorkspace("B")
	c, err := molecule.New(molecule.Config{PlatformURL: plat.URL(), WorkspaceID: a.ID, Token: a.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	ra := http.Header{"Retry-After": {"15"}}
	cases := []struct {
		route, status, body string
		header              http.Header
		want                verdict
		reason              string // in the reason given
	}{
		// /a2a: caller checks
		{events.RouteA2A, "403", `{"error":"invalid caller ID"}`, nil, permanentFailure, "MOLECULE_WORKSPACE_ID"},
		{events.RouteA2A, "401", `{"error":"missing caller auth token"}`, nil, permanentFailure, "token"},
		{events.RouteA2A, "401", `{"error":"invalid caller auth token"}`, nil, permanentFailure, "token"},
		{events.RouteA2A, "403", `{"error":"access denied: workspaces cannot communicate per hierarchy rules"}`, nil, permanentFailure, "hierarchy"},
		{events.RouteA2A, "402", `{"error":"workspace budget limit exceeded"}`, nil, permanentFailure, "budget"},
		{events.RouteA2A, "400", `{"error":"invalid JSON"}`, nil, permanentFailure, "invalid JSON"},
		// /a2a: 2026-08 (docs/protocol.md "Generations")
		{events.RouteA2A, "403", `{"error":"tool call failed"}`, nil, permanentFailure, "may not send A2A messages (can_delegate=false"},
		{events.RouteA2A, "401", `{"error":"caller ID does not match workspace auth token"}`, nil, permanentFailure, "belongs to another workspace"},
		{events.RouteA2A, "413", `{"error":"request body exceeds 16777216 byte limit: A2A body exceeds size limit","truncated":true,"max_bytes":16777216}`, nil, permanentFailure, "larger than the platform takes"},
		{events.RouteA2A, "503", `{"error":"concierge is warming up (verifying management tools) — retry shortly","warming":true,"retry_after":5}`, http.Header{"Retry-After": {"5"}}, notDelivered, "warming"},
		// /a2a: URL resolution (no row written)
		{events.RouteA2A, "404", `{"error":"workspace not found"}`, nil, refusedForNow, "does not exist"},
		{events.RouteA2A, "503", `{"error":"workspace has no URL","status":"awaiting_agent"}`, nil, refusedForNow, "workspace has no URL"},
		{events.RouteA2A, "503", `{"waking":true,"retry_after":15}`, ra, notDelivered, "waking"},
		{events.RouteA2A, "502", `{"error":"workspace URL is not publicly routable"}`, nil, permanentFailure, "publicly routable"},
		{events.RouteA2A, "410", `{"error":"workspace removed"}`, nil, refusedForNow, "removed"},
		// /a2a: delivery outcomes
		{events.RouteA2A, "503", `{"busy":true,"retry_after":30}`, http.Header{"Retry-After": {"30"}}, notDelivered, "busy"},
		{events.RouteA2A, "503", `{"restarting":true}`, nil, notDelivered, "restarting"},
		{events.RouteA2A, "502", `{"error":"failed to reach workspace agent"}`, nil, maybeDelivered, ""},
		{events.RouteA2A, "502", `{"error":"failed to read agent response","delivery_confirmed":false}`, nil, maybeDelivered, ""},
		{events.RouteA2A, "502", `{"error":"failed to read agent response","delivery_confirmed":true}`, nil, delivered, ""},
		{events.RouteA2A, "500", `{"error":"agent exploded"}`, nil, maybeDelivered, ""},
		{events.RouteA2A, "429", `{"error":"rate limit exceeded","retry_after":3}`, http.Header{"Retry-After": {"3"}}, notDelivered, "rate limited"},
		{events.RouteA2A, "404", ``, nil, permanentFailure, "tenant"},
		// /notify
		{events.RouteNotify, "400", `{"error":"message is required"}`, nil, permanentFailure, "message is required"},
		{events.RouteNotify, "400", `{"error":"attachment[0]: uri and name are required"}`, nil, permanentFailure, "uri and name"},
		{events.RouteNotify, "404", `{"error":"workspace not found"}`, nil, refusedForNow, "removed"},
		{events.RouteNotify, "403", `{"error":"talk_to_user_disabled","hint":"enable talk to user"}`, nil, permanentFailure, "talking to the user is disabled for this workspace (canvas setting"},
		{events.RouteNotify, "401", `{"error":"invalid workspace auth token"}`, nil, permanentFailure, "MOLECULE_WORKSPACE_TOKEN"},
		{events.RouteNotify, "429", `{"error":"rate limit exceeded","retry_after":3}`, http.Header{"Retry-After": {"3"}}, notDelivered, "Retry-After"},
	}
	for _, tc := range cases {
		t.Run(tc.route+" "+tc.status+" "+tc.body, func(t *testing.T) {
			path := "/workspaces/" + a.ID + "/notify"
			if tc.route == events.RouteA2A {
				path = "/workspaces/" + b.ID + "/a2a"
			}
			st, _ := strconv.Atoi(tc.status)
			plat.InjectFault(moleculetest.Fault{Method: http.MethodPost, PathPrefix: path, Status: st, Body: tc.body, Header: tc.header, Count: 1})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.route == events.RouteA2A {
				_, err = c.SendA2A(ctx, molecule.A2AMessage{To: b.ID, Text: "hi", MessageID: "m-1"})
			} else {
				_, err = c.Notify(ctx, "hi", nil)
			}
			if err == nil {
				t.Fatal("the post succeeded")
			}
			got := classifyRefusal(tc.route, err)
			if got.verdict != tc.want {
				t.Fatalf("verdict %d, want %d (%v)", got.verdict, tc.want, err)
			}
			if !strings.Contains(got.reason, tc.reason) && !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("reason %q (error %v) lacks %q", got.reason, err, tc.reason)
			}
		})
	}
}
