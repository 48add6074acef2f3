package lambdafn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/molecule-ai/molecule-relay/internal/awssecrets"
)

// Secrets come from AWS Secrets Manager or SSM Parameter Store through the
// AWS Parameters and Secrets Lambda Extension (internal/awssecrets).

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
var ErrSecret = awssecrets.ErrSecret

func newSecretStore(environ map[string]string) *awssecrets.Store {
	return awssecrets.New(environ[EnvExtensionPort], environ["AWS_SESSION_TOKEN"])
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
		if v.tokens, err = s.Get(ctx, tokID); err != nil {
			return v, err
		}
	}
	if credsID != "" {
		if v.creds, err = s.Get(ctx, credsID); err != nil {
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
