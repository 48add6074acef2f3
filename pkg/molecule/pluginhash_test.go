package molecule

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// pluginHashVectors is testdata/pluginhash/vectors.json, produced by
// python3 gen.py from the Python SDK's algorithm run on real files.
type pluginHashVectors struct {
	Python  string `json:"python"`
	Vectors []struct {
		Name  string   `json:"name"`
		Dirs  []string `json:"dirs"`
		Files []struct {
			PathHex    string `json:"path_hex"`
			ContentHex string `json:"content_hex"`
		} `json:"files"`
		Manifest string `json:"manifest"`
		SHA256   string `json:"sha256"`
	} `json:"vectors"`
}

// TestPluginHashPythonVectors builds each vector's tree on disk and checks
// that both the serialised manifest and the hash match CPython's, byte for
// byte. It lives inside the package to compare the manifest bytes.
func TestPluginHashPythonVectors(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "pluginhash", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vs pluginHashVectors
	if err := json.Unmarshal(b, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs.Vectors) < 8 {
		t.Fatalf("only %d vectors", len(vs.Vectors))
	}
	for _, v := range vs.Vectors {
		t.Run(v.Name, func(t *testing.T) {
			dir := t.TempDir()
			for _, d := range v.Dirs {
				if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(d)), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range v.Files {
				p, err := hex.DecodeString(f.PathHex)
				if err != nil {
					t.Fatal(err)
				}
				c, err := hex.DecodeString(f.ContentHex)
				if err != nil {
					t.Fatal(err)
				}
				full := filepath.Join(dir, filepath.FromSlash(string(p)))
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, c, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			m, err := pluginManifest(dir)
			if err != nil {
				t.Fatal(err)
			}
			if string(m) != v.Manifest {
				t.Errorf("manifest\n got: %s\nwant: %s", m, v.Manifest)
			}
			got, err := PluginHash(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got != v.SHA256 {
				t.Errorf("PluginHash = %s, want %s (python %s)", got, v.SHA256, vs.Python)
			}
		})
	}
}

func TestPluginHashSkipsSymlinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := PluginHash(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.txt", filepath.Join(dir, "link.txt")); err != nil {
		t.Skip("symlinks not supported:", err)
	}
	after, err := PluginHash(dir)
	if err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Fatal("a symlink changed the hash")
	}
}

func TestPluginHashMissingDir(t *testing.T) {
	if _, err := PluginHash(filepath.Join(t.TempDir(), "nope")); err == nil {
		t.Fatal("no error for a missing directory")
	}
}
