package filecache

import "encoding/binary"

// secretTail is how many of a secret's last bytes index it: a token
// shorter than this is never looked for (too short to tell from text).
const secretTail = 8

// holdsAny reports whether content holds one of secrets, in one pass
// over content whatever the number of secrets: a relay with thousands of
// workspaces checked a file once per token before (docs/workspace-registry.md).
//
// Each secret is indexed by its last 8 bytes, which differ between tokens
// even when they share a prefix (mol_, sk-…); each position of content
// whose next 8 bytes end a secret compares that secret whole. seen, one
// bit per 16-bit fold of those bytes, skips the map for almost every
// position.
func holdsAny(content []byte, secrets []string) bool {
	byTail := make(map[uint64][]string, len(secrets))
	var seen [1 << 16 / 64]uint64
	for _, s := range secrets {
		if len(s) < secretTail {
			continue
		}
		k := binary.LittleEndian.Uint64([]byte(s[len(s)-secretTail:]))
		byTail[k] = append(byTail[k], s)
		f := fold(k)
		seen[f/64] |= 1 << (f % 64)
	}
	if len(byTail) == 0 {
		return false
	}
	for end := secretTail; end <= len(content); end++ {
		k := binary.LittleEndian.Uint64(content[end-secretTail : end])
		if f := fold(k); seen[f/64]&(1<<(f%64)) == 0 {
			continue
		}
		for _, s := range byTail[k] {
			if end >= len(s) && string(content[end-len(s):end]) == s {
				return true
			}
		}
	}
	return false
}

func fold(k uint64) uint16 {
	k ^= k >> 32
	return uint16(k ^ k>>16)
}
