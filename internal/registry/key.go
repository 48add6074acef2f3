package registry

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Key is the AES-256 key that seals the tokens at rest.
type Key struct{ aead cipher.AEAD }

// ErrKey is matched by every key error: missing, malformed, wrong.
var ErrKey = errors.New("registry: key")

// ParseKey reads a key from its base64 form (32 bytes, standard or URL
// alphabet, padded or not).
func ParseKey(b64 string) (*Key, error) {
	s := strings.TrimSpace(b64)
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if raw, err = enc.DecodeString(s); err == nil {
			break
		}
	}
	if err != nil || len(raw) != 32 {
		return nil, fmt.Errorf("%w: not 32 bytes in base64 (%d characters given); make one with: head -c 32 /dev/urandom | base64", ErrKey, len(s))
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKey, err)
	}
	return &Key{aead: aead}, nil
}

// LoadKey reads the key from file (MOLECULE_REGISTRY_KEY_FILE, which must
// be readable by its owner only) or, when file is "", from b64
// (MOLECULE_REGISTRY_KEY).
func LoadKey(file, b64 string) (*Key, error) {
	if file != "" {
		fi, err := os.Stat(file)
		if err != nil {
			return nil, fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_FILE: %w", ErrKey, err)
		}
		if fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_FILE %s has mode %04o; it must be readable by its owner only: chmod 600 %s", ErrKey, file, fi.Mode().Perm(), file)
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("%w: MOLECULE_REGISTRY_KEY_FILE: %w", ErrKey, err)
		}
		k, err := ParseKey(string(b))
		if err != nil {
			return nil, fmt.Errorf("MOLECULE_REGISTRY_KEY_FILE %s: %w", file, err)
		}
		return k, nil
	}
	if b64 == "" {
		return nil, fmt.Errorf("%w: not set; set MOLECULE_REGISTRY_KEY_FILE (a 0600 file holding 32 random bytes in base64), MOLECULE_REGISTRY_KEY or MOLECULE_REGISTRY_KEY_SECRET", ErrKey)
	}
	k, err := ParseKey(b64)
	if err != nil {
		return nil, fmt.Errorf("MOLECULE_REGISTRY_KEY: %w", err)
	}
	return k, nil
}

// NewKey returns a random key and its base64 form.
func NewKey() (*Key, string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, "", err
	}
	s := base64.StdEncoding.EncodeToString(raw)
	k, err := ParseKey(s)
	return k, s, err
}

// seal encrypts token with AES-256-GCM, binding it to workspace id (the
// additional authenticated data): a sealed token copied onto another
// workspace's key does not open. The result is nonce || ciphertext+tag.
func (k *Key) seal(id, token string) []byte {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return k.aead.Seal(nonce, nonce, []byte(token), []byte(id))
}

// open reverses seal.
func (k *Key) open(id string, sealed []byte) (string, error) {
	n := k.aead.NonceSize()
	if len(sealed) < n {
		return "", fmt.Errorf("%w: sealed token of workspace %s is truncated", ErrKey, id)
	}
	b, err := k.aead.Open(nil, sealed[:n], sealed[n:], []byte(id))
	if err != nil {
		return "", fmt.Errorf("%w: the token of workspace %s does not open with this key (wrong MOLECULE_REGISTRY_KEY, or the entry was altered)", ErrKey, id)
	}
	return string(b), nil
}
