package lambdafn

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/samtemplate"
)

// template.yaml documents WorkspaceTokensSecretArn as "a JSON
// object {"<workspace id>": "<token>"}, or a bare token when WorkspaceIds
// names one workspace", and passes WorkspaceIds as MOLECULE_WORKSPACE_IDS.
// applyTokens once accepted a bare token only with MOLECULE_WORKSPACE_ID (which
// the template never sets), so a stack deployed with the documented bare
// token failed every poller and replier invocation with a ConfigError.
func TestTemplateBareTokenSecretLoads(t *testing.T) {
	root, err := samtemplate.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := samtemplate.Load(filepath.Join(root, "template.yaml"))
	if err != nil || len(docs) == 0 {
		t.Fatalf("template.yaml: %v", err)
	}
	const (
		ws        = "35637291-d55e-4553-896c-13c2e02fe4f7"
		tokensARN = "arn:aws:secretsmanager:us-east-1:000000000000:secret:relay-tokens"
		natsARN   = "arn:aws:secretsmanager:us-east-1:000000000000:secret:relay-nats"
	)
	port := extension(t, map[string]string{
		tokensARN: "tok-single", // the bare token the template allows for one workspace
		natsARN:   `{"user":"poller","password":"pw"}`,
	}, nil)
	params := map[string]string{
		"PlatformUrl": "https://acme.moleculesai.app", "WorkspaceIds": ws, "NatsUrl": "nats://127.0.0.1:4222",
		"NatsCredsSecretArn": natsARN, "WorkspaceTokensSecretArn": tokensARN, "StreamReplicas": "3",
		"TopologyMode": "lookup", "LogLevel": "INFO",
		"PlatformUrls": "", "OrgIds": "", // their defaults: one tenant
		// A function's Ref is its name.
		"DispatcherFunction": "relay-dispatcher", "ReplierFunction": "relay-replier",
	}
	for _, fn := range []string{"PollerFunction", "ReplierFunction"} {
		t.Run(fn, func(t *testing.T) {
			// What Lambda sets: the region and the role's credentials, which
			// the wake-ups sign with.
			environ := []string{EnvExtensionPort + "=" + port, "AWS_SESSION_TOKEN=session-token",
				"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=ASIAEXAMPLE", "AWS_SECRET_ACCESS_KEY=secret"}
			for _, path := range [][]string{
				{"Globals", "Function", "Environment", "Variables"},
				{"Resources", fn, "Properties", "Environment", "Variables"},
			} {
				vars, _ := samtemplate.Path(docs[0], path...)
				m, _ := vars.(map[string]any)
				for k, v := range m {
					if fn, _ := v.(map[string]any); fn != nil {
						if f, ok := fn["Fn::If"].([]any); ok && len(f) == 3 && f[0] == "HasRegistry" {
							v = f[2] // RegistryKeySecretArn's default, "": no registry
						}
					}
					switch v := v.(type) {
					case string:
						environ = append(environ, k+"="+v)
					case map[string]any:
						name, _ := v["Ref"].(string)
						if name == "AWS::NoValue" {
							continue
						}
						val, ok := params[name]
						if !ok {
							t.Fatalf("%s: %v: unexpected value", k, v)
						}
						environ = append(environ, k+"="+val)
					default:
						environ = append(environ, fmt.Sprintf("%s=%v", k, v))
					}
				}
			}
			stage := map[string]Stage{"PollerFunction": Poller, "ReplierFunction": Replier}[fn]
			f := New(stage, environ, slog.New(slog.DiscardHandler))
			if err := f.load(context.Background()); err != nil {
				t.Fatalf("%s with the template's environment and a bare-token secret for its one workspace: %v", fn, err)
			}
			if ws := f.cfg.Workspaces(); len(ws) != 1 || ws[0].Token != "tok-single" {
				t.Fatalf("workspaces %v", ws)
			}
		})
	}
}
