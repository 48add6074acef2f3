package filecache

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// naiveHolds is the check holdsAny replaced: one search per secret.
func naiveHolds(content []byte, secrets []string) bool {
	for _, s := range secrets {
		if len(s) >= secretTail && bytes.Contains(content, []byte(s)) {
			return true
		}
	}
	return false
}

func TestSecretScanFindsEveryTokenOnce(t *testing.T) {
	tokens := []string{"mol_ws_0001_abcdefgh", "mol_ws_0002_abcdefgh", "short", "sk-XYZ12345", "12345678"}
	cases := []struct {
		name    string
		content string
		want    bool
	}{
		{"a .env", "MOLECULE_WORKSPACE_TOKEN=mol_ws_0002_abcdefgh\n", true},
		{"the token alone", "sk-XYZ12345", true},
		{"exactly 8 bytes", "12345678", true},
		{"a shared tail, another prefix", "xyz_ws_0002_abcdefgh", false},
		{"cut by one byte", "mol_ws_0002_abcdefg", false},
		{"a short token is not looked for", "short", false},
		{"empty", "", false},
		{"at the very start", "mol_ws_0001_abcdefgh and more", true},
	}
	for _, c := range cases {
		got := holdsAny([]byte(c.content), tokens)
		if got != c.want || got != naiveHolds([]byte(c.content), tokens) {
			t.Errorf("%s: holdsAny = %v, want %v", c.name, got, c.want)
		}
	}
}

func FuzzSecretScanMatchesOneSearchPerToken(f *testing.F) {
	f.Add([]byte("token=abcdefgh12345678;"), "abcdefgh12345678", "12345678")
	f.Add([]byte("aaaaaaaaaaaaaaaaa"), "aaaaaaaaa", "baaaaaaaa")
	f.Fuzz(func(t *testing.T, content []byte, a, b string) {
		secrets := []string{a, b, a + b}
		if got, want := holdsAny(content, secrets), naiveHolds(content, secrets); got != want {
			t.Fatalf("holdsAny(%q, %q) = %v, one search per token says %v", content, secrets, got, want)
		}
	})
}

// BenchmarkSecretScan: one 1 MiB file against a fleet's tokens (sharing a
// prefix, as a platform's do), none of them in it.
func BenchmarkSecretScan(b *testing.B) {
	content := []byte(strings.Repeat("row,mol_ws_00x,some text of a report\n", 1<<20/38))
	for _, n := range []int{1, 1000, 10000} {
		tokens := make([]string, n)
		for i := range tokens {
			tokens[i] = fmt.Sprintf("mol_ws_%08d_%016x", i, uint64(i)*0x9E3779B97F4A7C15)
		}
		b.Run(fmt.Sprintf("tokens=%d/one-pass", n), func(b *testing.B) {
			b.SetBytes(int64(len(content)))
			for b.Loop() {
				if holdsAny(content, tokens) {
					b.Fatal("found a token that is not there")
				}
			}
		})
		if n > 1000 {
			continue // about 10 s an iteration
		}
		b.Run(fmt.Sprintf("tokens=%d/per-token", n), func(b *testing.B) {
			b.SetBytes(int64(len(content)))
			for b.Loop() {
				if naiveHolds(content, tokens) {
					b.Fatal("found a token that is not there")
				}
			}
		})
	}
}
