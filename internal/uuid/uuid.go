// Package uuid makes and checks the UUIDs the relay and its platform double
// use: random ones (version 4) for JSON-RPC and row ids, and name-based ones
// (SHA-1, version 5 layout) for ids that must come out the same on every
// retry.
package uuid

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
)

// New returns a random (version 4) UUID in canonical lower-case form.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return format(b)
}

// FromName returns the SHA-1 name-based UUID of name: the first 16 bytes of
// SHA-1(name) with the version 5 and RFC 4122 variant bits set. The same
// name always gives the same UUID. Unlike RFC 4122's version 5 there is no
// 16-byte namespace: callers put a fixed text prefix in name instead.
func FromName(name string) string {
	h := sha1.Sum([]byte(name))
	var b [16]byte
	copy(b[:], h[:16])
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return format(b)
}

// Valid reports whether s has the canonical 8-4-4-4-12 hexadecimal form
// (either case).
func Valid(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !isHex(c) {
				return false
			}
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func format(b [16]byte) string {
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}
