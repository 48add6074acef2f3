package lambdafn

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// extension imitates the AWS Parameters and Secrets Lambda Extension's HTTP
// API on loopback.
func extension(t *testing.T, secrets map[string]string, params map[string]string) (port string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Aws-Parameters-Secrets-Token") != "session-token" {
			http.Error(w, "missing session token", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/secretsmanager/get":
			v, ok := secrets[r.URL.Query().Get("secretId")]
			if !ok {
				http.Error(w, `{"__type":"ResourceNotFoundException"}`, http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte(`{"Name":"x","SecretString":` + quote(v) + `}`))
		case "/systemsmanager/parameters/get":
			if r.URL.Query().Get("withDecryption") != "true" {
				http.Error(w, "not decrypted", http.StatusBadRequest)
				return
			}
			v, ok := params[r.URL.Query().Get("name")]
			if !ok {
				http.Error(w, `{"__type":"ParameterNotFound"}`, http.StatusBadRequest)
				return
			}
			_, _ = w.Write([]byte(`{"Parameter":{"Value":` + quote(v) + `}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	_, port, _ = net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	return port
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

func TestResolveSecrets(t *testing.T) {
	const (
		a = "35637291-d55e-4553-896c-13c2e02fe4f7"
		b = "b48f61e0-0000-4000-8000-000000000002"
	)
	port := extension(t,
		map[string]string{"arn:aws:secretsmanager:eu-west-1:1:secret:tokens": `{"` + a + `":"tok-a","` + b + `":"tok-b"}`,
			"single": "tok-single\n", "creds": "-----BEGIN NATS USER JWT-----\nx\n",
			"userpass": `{"user":"dispatcher","password":"pw-1"}`, "badjson": `{"user":""}`},
		map[string]string{"/relay/tokens": `{"` + a + `":"tok-a"}`})
	base := func(kv ...string) map[string]string {
		m := map[string]string{EnvExtensionPort: port, "AWS_SESSION_TOKEN": "session-token"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	ctx := context.Background()

	m := base("MOLECULE_WORKSPACE_IDS", b+","+a, EnvTokensSecret, "arn:aws:secretsmanager:eu-west-1:1:secret:tokens", EnvNATSCredsSecret, "creds")
	if err := resolveSecrets(ctx, m, t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if m["MOLECULE_WORKSPACE_TOKENS"] != "tok-b,tok-a" {
		t.Fatalf("tokens %q", m["MOLECULE_WORKSPACE_TOKENS"])
	}
	fi, err := os.Stat(m["NATS_CREDS"])
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("creds file %v mode %v", err, fi.Mode())
	}

	m = base(EnvNATSCredsSecret, "userpass")
	if err := resolveSecrets(ctx, m, t.TempDir()); err != nil || m["NATS_USER"] != "dispatcher" || m["NATS_PASSWORD"] != "pw-1" || m["NATS_CREDS"] != "" {
		t.Fatalf("user/password NATS secret: %v %v", err, m)
	}
	if err := resolveSecrets(ctx, base(EnvNATSCredsSecret, "badjson"), t.TempDir()); !errors.Is(err, ErrSecret) {
		t.Fatalf("incomplete user/password secret: %v", err)
	}

	m = base("MOLECULE_WORKSPACE_ID", a, EnvTokensSecret, "single")
	if err := resolveSecrets(ctx, m, t.TempDir()); err != nil || m["MOLECULE_WORKSPACE_TOKEN"] != "tok-single" {
		t.Fatalf("single: %v %q", err, m["MOLECULE_WORKSPACE_TOKEN"])
	}
	m = base("MOLECULE_WORKSPACE_ID", a, EnvTokensSecret, "/relay/tokens")
	if err := resolveSecrets(ctx, m, t.TempDir()); err != nil || m["MOLECULE_WORKSPACE_TOKEN"] != "tok-a" {
		t.Fatalf("ssm: %v %q", err, m["MOLECULE_WORKSPACE_TOKEN"])
	}

	for name, m := range map[string]map[string]string{
		"missing secret":   base("MOLECULE_WORKSPACE_ID", a, EnvTokensSecret, "nope"),
		"id not in secret": base("MOLECULE_WORKSPACE_IDS", a+",c0000000-0000-4000-8000-000000000003", EnvTokensSecret, "arn:aws:secretsmanager:eu-west-1:1:secret:tokens"),
		"bare token, ids":  base("MOLECULE_WORKSPACE_IDS", a+",c0000000-0000-4000-8000-000000000003", EnvTokensSecret, "single"),
		"bad session":      {EnvExtensionPort: port, "AWS_SESSION_TOKEN": "wrong", EnvTokensSecret: "single", "MOLECULE_WORKSPACE_ID": a},
		"no extension":     {EnvExtensionPort: "1", EnvTokensSecret: "single", "MOLECULE_WORKSPACE_ID": a},
	} {
		err := resolveSecrets(ctx, m, t.TempDir())
		if !errors.Is(err, ErrSecret) {
			t.Errorf("%s: %v; want ErrSecret", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "tok-") {
			t.Errorf("%s: error leaks a token: %v", name, err)
		}
	}
	if err := resolveSecrets(ctx, map[string]string{}, t.TempDir()); err != nil {
		t.Fatalf("no secrets configured: %v", err)
	}
}
