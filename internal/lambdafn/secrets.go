package lambdafn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Secrets come from AWS Secrets Manager or SSM Parameter Store through the
// "AWS Parameters and Secrets Lambda Extension" (a layer that serves
// http://localhost:2773 inside the execution environment, authenticated with
// the function's session token). Using the extension keeps the AWS SDK out of
// the binaries and caches values across invocations.
//
// IAM: secretsmanager:GetSecretValue on the secret ARNs (or
// ssm:GetParameter on the parameter ARNs), plus kms:Decrypt on a customer
// managed key if one encrypts them. template.yaml grants exactly these.

// Environment variables naming secrets.
const (
	// EnvTokensSecret names a secret holding workspace tokens: either a JSON
	// object {"<workspace id>": "<token>", …} (paired with
	// MOLECULE_WORKSPACE_IDS / MOLECULE_WORKSPACE_ID) or a bare token for a
	// single MOLECULE_WORKSPACE_ID.
	EnvTokensSecret = "MOLECULE_WORKSPACE_TOKENS_SECRET"
	// EnvNATSCredsSecret names a secret holding either a NATS credentials
	// file's content (JWT and seed; written to a 0600 file and used as
	// NATS_CREDS) or a JSON object {"user": "...", "password": "..."}
	// (used as NATS_USER and NATS_PASSWORD, as the infra/nats accounts
	// expect).
	EnvNATSCredsSecret = "NATS_CREDS_SECRET"
	// EnvExtensionPort overrides the extension's port (the extension's own
	// variable). If not set, 2773.
	EnvExtensionPort = "PARAMETERS_SECRETS_EXTENSION_HTTP_PORT"
)

// ErrSecret is matched by every secret-resolution failure.
var ErrSecret = errors.New("lambdafn: secret")

// secretStore fetches secret values.
type secretStore struct {
	base  string // http://localhost:2773
	token string // AWS_SESSION_TOKEN
	hc    *http.Client
}

func newSecretStore(environ map[string]string) *secretStore {
	port := environ[EnvExtensionPort]
	if port == "" {
		port = "2773"
	}
	return &secretStore{base: "http://localhost:" + port, token: environ["AWS_SESSION_TOKEN"], hc: &http.Client{Timeout: 10 * time.Second}}
}

// get fetches id: an SSM parameter when id is an SSM ARN or a path
// ("/relay/tokens"), else a Secrets Manager secret id or ARN.
func (s *secretStore) get(ctx context.Context, id string) (string, error) {
	ssm := strings.HasPrefix(id, "/") || strings.HasPrefix(id, "arn:aws:ssm:") || strings.HasPrefix(id, "arn:aws-cn:ssm:") || strings.HasPrefix(id, "arn:aws-us-gov:ssm:")
	var u string
	if ssm {
		u = s.base + "/systemsmanager/parameters/get?withDecryption=true&name=" + url.QueryEscape(id)
	} else {
		u = s.base + "/secretsmanager/get?secretId=" + url.QueryEscape(id)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("%w %s: %w", ErrSecret, id, err)
	}
	req.Header.Set("X-Aws-Parameters-Secrets-Token", s.token)
	resp, err := s.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("%w %s: the Parameters and Secrets extension is not reachable at %s (is its layer attached?): %w", ErrSecret, id, s.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("%w %s: %w", ErrSecret, id, err)
	}
	if resp.StatusCode != http.StatusOK {
		// The body names the AWS error (AccessDenied, ResourceNotFound); it
		// never holds the secret.
		return "", fmt.Errorf("%w %s: extension answered %d: %s", ErrSecret, id, resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if ssm {
		var p struct {
			Parameter struct {
				Value string `json:"Value"`
			} `json:"Parameter"`
		}
		if err := json.Unmarshal(body, &p); err != nil {
			return "", fmt.Errorf("%w %s: unexpected answer shape: %w", ErrSecret, id, err)
		}
		return p.Parameter.Value, nil
	}
	var sv struct {
		SecretString *string `json:"SecretString"`
	}
	if err := json.Unmarshal(body, &sv); err != nil || sv.SecretString == nil {
		return "", fmt.Errorf("%w %s: the secret has no SecretString (binary secrets are not supported)", ErrSecret, id)
	}
	return *sv.SecretString, nil
}

// secretValues are the raw values of the configured secrets ("" for one
// not configured).
type secretValues struct{ tokens, creds string }

// fetchSecrets reads the secrets environ names. The extension caches them
// (300 s by default), so a warm environment may call it every invocation.
func fetchSecrets(ctx context.Context, environ map[string]string) (secretValues, error) {
	var v secretValues
	tokID, credsID := environ[EnvTokensSecret], environ[EnvNATSCredsSecret]
	if tokID == "" && credsID == "" {
		return v, nil
	}
	s := newSecretStore(environ)
	var err error
	if tokID != "" {
		if v.tokens, err = s.get(ctx, tokID); err != nil {
			return v, err
		}
	}
	if credsID != "" {
		if v.creds, err = s.get(ctx, credsID); err != nil {
			return v, err
		}
	}
	return v, nil
}

// resolveSecrets replaces the *_SECRET variables of environ by the values
// they name: MOLECULE_WORKSPACE_TOKEN(S) and NATS_CREDS (a 0600 file in
// dir). It changes nothing when no secret is configured.
func resolveSecrets(ctx context.Context, environ map[string]string, dir string) error {
	v, err := fetchSecrets(ctx, environ)
	if err != nil {
		return err
	}
	return applySecrets(environ, v, dir, "")
}

// applySecrets sets the variables of fetched secret values in environ. A
// NATS credentials file is written to dir, unless credsFile already holds
// sv.creds: nats.go re-reads the file at every reconnect, so a file still
// in use must stay where it is.
func applySecrets(environ map[string]string, sv secretValues, dir, credsFile string) error {
	tokID, credsID := environ[EnvTokensSecret], environ[EnvNATSCredsSecret]
	if tokID != "" {
		if err := applyTokens(environ, strings.TrimSpace(sv.tokens)); err != nil {
			return fmt.Errorf("%w %s: %w", ErrSecret, tokID, err)
		}
	}
	if credsID != "" {
		v := sv.creds
		if strings.HasPrefix(strings.TrimSpace(v), "{") {
			var up struct {
				User     string `json:"user"`
				Password string `json:"password"`
			}
			if err := json.Unmarshal([]byte(v), &up); err != nil || up.User == "" || up.Password == "" {
				return fmt.Errorf("%w %s: a JSON NATS secret must be {\"user\": \"...\", \"password\": \"...\"}", ErrSecret, credsID)
			}
			environ["NATS_USER"], environ["NATS_PASSWORD"] = up.User, up.Password
			return nil
		}
		if credsFile != "" {
			environ["NATS_CREDS"] = credsFile
			return nil
		}
		f, err := os.CreateTemp(dir, "nats-*.creds")
		if err != nil {
			return fmt.Errorf("%w %s: %w", ErrSecret, credsID, err)
		}
		defer f.Close()
		if err := f.Chmod(0o600); err != nil {
			return fmt.Errorf("%w %s: %w", ErrSecret, credsID, err)
		}
		if _, err := f.WriteString(v); err != nil {
			return fmt.Errorf("%w %s: %w", ErrSecret, credsID, err)
		}
		environ["NATS_CREDS"] = f.Name()
	}
	return nil
}

// applyTokens sets the token variables from a secret value.
func applyTokens(environ map[string]string, v string) error {
	if !strings.HasPrefix(v, "{") {
		// A bare token, for one workspace: MOLECULE_WORKSPACE_ID, or a
		// MOLECULE_WORKSPACE_IDS of one id (template.yaml's WorkspaceIds).
		switch ids := strings.Split(environ["MOLECULE_WORKSPACE_IDS"], ","); {
		case environ["MOLECULE_WORKSPACE_ID"] != "":
			environ["MOLECULE_WORKSPACE_TOKEN"] = v
		case len(ids) == 1 && strings.TrimSpace(ids[0]) != "":
			environ["MOLECULE_WORKSPACE_TOKENS"] = v
		default:
			return errors.New("holds a single token, but names no single workspace (set MOLECULE_WORKSPACE_ID, or use a JSON object {\"<workspace id>\": \"<token>\"} for several MOLECULE_WORKSPACE_IDS)")
		}
		return nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(v), &m); err != nil {
		return errors.New("is not a JSON object of workspace id to token")
	}
	if id := environ["MOLECULE_WORKSPACE_ID"]; id != "" {
		tok, ok := m[id]
		if !ok {
			return fmt.Errorf("has no token for MOLECULE_WORKSPACE_ID %s", id)
		}
		environ["MOLECULE_WORKSPACE_TOKEN"] = tok
	}
	if ids := environ["MOLECULE_WORKSPACE_IDS"]; ids != "" {
		var toks []string
		for _, id := range strings.Split(ids, ",") {
			id = strings.TrimSpace(id)
			tok, ok := m[id]
			if !ok {
				return fmt.Errorf("has no token for workspace %s of MOLECULE_WORKSPACE_IDS", id)
			}
			toks = append(toks, tok)
		}
		environ["MOLECULE_WORKSPACE_TOKENS"] = strings.Join(toks, ",")
	}
	return nil
}
