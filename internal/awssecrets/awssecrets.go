// Package awssecrets reads AWS Secrets Manager secrets and SSM Parameter
// Store parameters through the AWS Parameters and Secrets Lambda Extension,
// a layer that serves http://localhost:2773 inside a Lambda execution
// environment, authenticated with the function's session token
// (https://docs.aws.amazon.com/secretsmanager/latest/userguide/retrieving-secrets_lambda.html).
// Using the extension keeps the AWS SDK out of the binaries and caches
// values across invocations.
//
// IAM: secretsmanager:GetSecretValue on the secret ARNs (or
// ssm:GetParameter on the parameter ARNs), plus kms:Decrypt on a customer
// managed key if one encrypts them. template.yaml grants exactly these.
package awssecrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultPort is the extension's port when PARAMETERS_SECRETS_EXTENSION_HTTP_PORT is not set.
const DefaultPort = "2773"

// ErrSecret is matched by every failure to read a secret.
var ErrSecret = errors.New("secret")

// ErrUnavailable is matched, besides ErrSecret, when the extension did not
// answer or refused (no layer, no permission, no such secret): nothing is
// wrong with the value itself.
var ErrUnavailable = errors.New("not available")

// Store reads secrets through the extension.
type Store struct {
	base  string // http://localhost:2773
	token string // AWS_SESSION_TOKEN
	hc    *http.Client
}

// New returns a Store for the extension on port ("": DefaultPort),
// authenticated with sessionToken (AWS_SESSION_TOKEN).
func New(port, sessionToken string) *Store {
	if port == "" {
		port = DefaultPort
	}
	return &Store{base: "http://localhost:" + port, token: sessionToken, hc: &http.Client{Timeout: 10 * time.Second}}
}

// Get fetches id: an SSM parameter when id is an SSM ARN or a path
// ("/relay/tokens"), else a Secrets Manager secret id or ARN (its
// SecretString; GET /secretsmanager/get?secretId=…, header
// X-Aws-Parameters-Secrets-Token).
func (s *Store) Get(ctx context.Context, id string) (string, error) {
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
		return "", fmt.Errorf("%w %s %w: the Parameters and Secrets extension is not reachable at %s (is its layer attached?): %w", ErrSecret, id, ErrUnavailable, s.base, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("%w %s %w: %w", ErrSecret, id, ErrUnavailable, err)
	}
	if resp.StatusCode != http.StatusOK {
		// The body names the AWS error (AccessDenied, ResourceNotFound); it
		// never holds the secret.
		return "", fmt.Errorf("%w %s %w: extension answered %d: %.300s", ErrSecret, id, ErrUnavailable, resp.StatusCode, strings.TrimSpace(string(body)))
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
