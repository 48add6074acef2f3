package molecule

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"
)

// PluginHash returns the content hash the Python SDK checks against the
// sha256 key of a plugin's plugin.yaml (molecule_agent
// verify_plugin_sha256): the list of [relative path, sha256 hex of the
// content] pairs of every regular file under dir except the top-level
// plugin.yaml, sorted by path, serialised exactly as Python's
// json.dumps(pairs) with default settings, then sha256 of those bytes, in
// lower-case hex. A plugin with no other file hashes "[]".
//
// Paths use "/" and sort by Unicode code point, as Python sorts str; a name
// that is not valid UTF-8 is treated as Python's surrogateescape decoding
// would (each bad byte b becomes U+DC00+b). Unlike Python's Path.is_file,
// symbolic links are not followed and not hashed: InstallPlugin never
// creates them.
func PluginHash(dir string) (string, error) {
	manifest, err := pluginManifest(dir)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(manifest)
	return hex.EncodeToString(sum[:]), nil
}

type pluginFile struct {
	path  string // relative, "/"-separated
	runes []rune // path as Python sees it, for sorting
	sum   string
}

// pluginManifest returns the JSON bytes PluginHash hashes.
func pluginManifest(dir string) ([]byte, error) {
	var files []pluginFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == "plugin.yaml" {
			// It holds the hash itself.
			return nil
		}
		sum, err := fileSHA256(p)
		if err != nil {
			return err
		}
		files = append(files, pluginFile{path: rel, runes: pyRunes(rel), sum: sum})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("molecule: plugin hash of %s: %w", dir, err)
	}
	slices.SortFunc(files, func(a, b pluginFile) int { return slices.Compare(a.runes, b.runes) })

	var sb strings.Builder
	sb.WriteByte('[')
	for i, f := range files {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('[')
		pyJSONString(&sb, f.runes)
		sb.WriteString(", ")
		sb.WriteByte('"')
		sb.WriteString(f.sum)
		sb.WriteByte('"')
		sb.WriteByte(']')
	}
	sb.WriteByte(']')
	return []byte(sb.String()), nil
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// pyRunes decodes s as Python decodes a file name (UTF-8 with
// surrogateescape): every byte of an invalid sequence becomes U+DC00+byte.
func pyRunes(s string) []rune {
	out := make([]rune, 0, len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			out = append(out, 0xDC00+rune(s[i]))
			i++
			continue
		}
		out = append(out, r)
		i += n
	}
	return out
}

// pyJSONString writes rs as Python's json.dumps writes a str with
// ensure_ascii=True: '"' and '\\' backslash-escaped; \n \r \t \b \f short
// escapes; every other code point outside ' '..'~' as \uXXXX (lower-case
// hex), astral ones as a surrogate pair.
func pyJSONString(sb *strings.Builder, rs []rune) {
	const hexdigits = "0123456789abcdef"
	u := func(c rune) {
		sb.WriteString(`\u`)
		sb.WriteByte(hexdigits[c>>12&0xf])
		sb.WriteByte(hexdigits[c>>8&0xf])
		sb.WriteByte(hexdigits[c>>4&0xf])
		sb.WriteByte(hexdigits[c&0xf])
	}
	sb.WriteByte('"')
	for _, r := range rs {
		switch {
		case r == '"':
			sb.WriteString(`\"`)
		case r == '\\':
			sb.WriteString(`\\`)
		case r == '\n':
			sb.WriteString(`\n`)
		case r == '\r':
			sb.WriteString(`\r`)
		case r == '\t':
			sb.WriteString(`\t`)
		case r == '\b':
			sb.WriteString(`\b`)
		case r == '\f':
			sb.WriteString(`\f`)
		case r >= ' ' && r <= '~':
			sb.WriteByte(byte(r))
		case r > 0xFFFF:
			r -= 0x10000
			u(0xD800 | (r>>10)&0x3FF)
			u(0xDC00 | r&0x3FF)
		default:
			u(r)
		}
	}
	sb.WriteByte('"')
}
