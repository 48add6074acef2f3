package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

// ErrKeyUnavailable: the key's source did not answer (the Secrets Manager
// extension not running, the secret not readable): a runtime failure, not
// a configuration one.
var ErrKeyUnavailable = errors.New("registry: key not available")

// extensionWait bounds the wait for the extension, which starts beside
// the function and may not listen yet at its first read.
const extensionWait = 10 * time.Second

// KeyFromConfig reads the key from the one source cfg sets:
// MOLECULE_REGISTRY_KEY_FILE, MOLECULE_REGISTRY_KEY, or
// MOLECULE_REGISTRY_KEY_SECRET (AWS Secrets Manager, through the AWS
// Parameters and Secrets Lambda Extension). A bad or missing setting
// matches ErrKey; a source that does not answer, ErrKeyUnavailable.
func KeyFromConfig(ctx context.Context, cfg *config.Config) (*Key, error) {
	if set := cfg.RegistryKeySources(); len(set) > 1 {
		return nil, fmt.Errorf("%w: %s and %s are both set; set exactly one key source", ErrKey, set[0], set[1])
	}
	if cfg.RegistryKeySecret == "" {
		return LoadKey(cfg.RegistryKeyFile, cfg.RegistryKey)
	}
	s, err := fetchSecret(ctx, cfg.SecretsExtensionPort, cfg.AWSSessionToken, cfg.RegistryKeySecret)
	if err != nil {
		return nil, err
	}
	k, err := ParseKey(s)
	if err != nil {
		return nil, fmt.Errorf("MOLECULE_REGISTRY_KEY_SECRET %s: its SecretString: %w", cfg.RegistryKeySecret, err)
	}
	return k, nil
}

// fetchSecret reads secret id's SecretString from the AWS Parameters and
// Secrets Lambda Extension: GET
// http://localhost:<port>/secretsmanager/get?secretId=<id> with the
// function's session token in X-Aws-Parameters-Secrets-Token; the answer
// is GetSecretValue's JSON (docs/workspace-registry.md, Encryption).
func fetchSecret(ctx context.Context, port int, sessionToken, id string) (string, error) {
	if sessionToken == "" {
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET needs AWS_SESSION_TOKEN (Lambda sets it)", ErrKey)
	}
	u := "http://localhost:" + strconv.Itoa(port) + "/secretsmanager/get?secretId=" + url.QueryEscape(id)
	var resp *http.Response
	op := func() error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return backoff.Permanent(err)
		}
		req.Header.Set("X-Aws-Parameters-Secrets-Token", sessionToken)
		resp, err = http.DefaultClient.Do(req)
		return err // not listening yet: try again
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxElapsedTime = 50*time.Millisecond, extensionWait
	if err := backoff.Retry(op, backoff.WithContext(bo, ctx)); err != nil {
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET: the AWS Parameters and Secrets Lambda Extension on localhost:%d did not answer (is its layer on the function?): %w", ErrKeyUnavailable, port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET %s: reading the extension's answer: %w", ErrKeyUnavailable, id, err)
	}
	if resp.StatusCode != http.StatusOK {
		// An error answer names the cause (AccessDenied, not found); it
		// holds no secret.
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET %s: the extension answered HTTP %d: %.300s (does the function's role have secretsmanager:GetSecretValue on it, and kms:Decrypt on its key?)",
			ErrKeyUnavailable, id, resp.StatusCode, body)
	}
	var v struct {
		SecretString string `json:"SecretString"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.SecretString == "" {
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET %s: no SecretString in the answer (a binary secret? store the key as text: 32 bytes in base64)", ErrKey, id)
	}
	return v.SecretString, nil
}
