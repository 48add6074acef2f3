package registry

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// extension is a local stand-in for the AWS Parameters and Secrets Lambda
// Extension, which runs only inside a Lambda execution environment (AWS
// cannot run here): it speaks the extension's documented protocol (GET
// /secretsmanager/get?secretId=…, the session token in
// X-Aws-Parameters-Secrets-Token, GetSecretValue's JSON back) over the
// secrets it holds, and refuses a request without the token.
func extension(t *testing.T, session string, secrets map[string]string) (port int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/secretsmanager/get" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("X-Aws-Parameters-Secrets-Token") != session {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		id := r.URL.Query().Get("secretId")
		v, ok := secrets[id]
		if !ok {
			http.Error(w, "ResourceNotFoundException: Secrets Manager can't find the specified secret.", http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ARN": id, "Name": id, "SecretString": v, "VersionId": "v1", "VersionStages": []string{"AWSCURRENT"}})
	}))
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	port, _ = strconv.Atoi(p)
	return port
}

// TestKeyReadFromSecretsManagerExtension: MOLECULE_REGISTRY_KEY_SECRET
// reads the key through the extension, with the session token, by name
// or ARN; a token sealed with the operator's key opens with it. Bad
// sources are errors naming the setting: a secret not found or a wrong
// token (the key not available), a SecretString that is no key, two
// sources set, no session token (configuration).
func TestKeyReadFromSecretsManagerExtension(t *testing.T) {
	want, b64, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	const arn = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:molecule/registry-key-AbCdEf"
	port := extension(t, "session-token", map[string]string{arn: b64, "not-a-key": "hunter2"})
	cfg := func(secret, session string) *config.Config {
		return &config.Config{RegistryKeySecret: secret, SecretsExtensionPort: port, AWSSessionToken: session}
	}
	k, err := KeyFromConfig(context.Background(), cfg(arn, "session-token"))
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := k.open("ws-1", want.seal("ws-1", "the token")); err != nil || tok != "the token" {
		t.Fatalf("a token sealed with the operator's key opens as %q, %v", tok, err)
	}

	both := cfg(arn, "session-token")
	both.RegistryKeyFile = "/etc/registry.key"
	for _, c := range []struct {
		name string
		cfg  *config.Config
		is   error
		says string
	}{
		{"not found", cfg("molecule/other", "session-token"), ErrKeyUnavailable, "answered 400"},
		{"wrong session token", cfg(arn, "someone else's"), ErrKeyUnavailable, "answered 401"},
		{"not a key", cfg("not-a-key", "session-token"), ErrKey, "not 32 bytes"},
		{"two sources", both, ErrKey, "MOLECULE_REGISTRY_KEY_FILE and MOLECULE_REGISTRY_KEY_SECRET"},
		{"no session token", cfg(arn, ""), ErrKey, "AWS_SESSION_TOKEN"},
	} {
		_, err := KeyFromConfig(context.Background(), c.cfg)
		if !errors.Is(err, c.is) || !strings.Contains(err.Error(), "MOLECULE_REGISTRY_KEY") || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v; want %v naming the setting and %q", c.name, err, c.is, c.says)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows the secret's value: %v", c.name, err)
		}
	}
}
