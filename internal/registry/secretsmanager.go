package registry

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/molecule-ai/molecule-relay/internal/awssecrets"
	"github.com/molecule-ai/molecule-relay/internal/config"
)

// ErrKeyUnavailable: the key's source did not answer (the Secrets Manager
// extension not running, the secret not readable): a runtime failure, not
// a configuration one.
var ErrKeyUnavailable = errors.New("registry: key not available")

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

// fetchSecret reads secret id's SecretString through the AWS Parameters
// and Secrets Lambda Extension (internal/awssecrets).
func fetchSecret(ctx context.Context, port int, sessionToken, id string) (string, error) {
	if sessionToken == "" {
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET needs AWS_SESSION_TOKEN (Lambda sets it)", ErrKey)
	}
	v, err := awssecrets.New(strconv.Itoa(port), sessionToken).Get(ctx, id)
	switch {
	case errors.Is(err, awssecrets.ErrUnavailable):
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET: %w (does the function's role have secretsmanager:GetSecretValue on it, and kms:Decrypt on its key?)", ErrKeyUnavailable, err)
	case err != nil:
		return "", fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_SECRET: %w; store the key as text: 32 bytes in base64", ErrKey, err)
	}
	return v, nil
}
