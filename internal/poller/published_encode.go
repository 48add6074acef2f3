// The published-row snapshot's format (published.go).

package poller

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
	"time"
)

// snapshotFormat is the snapshot's first byte.
const snapshotFormat = 1

// encodeSnapshot writes rows (oldest first) as: a format byte, then per row
// the uvarint of its created_at in µs after the previous row's (the first
// after zero), and its id: 0 and 16 bytes for a canonical UUID, else 1,
// the uvarint of its length and its bytes.
func encodeSnapshot(rows []recentID) []byte {
	b := make([]byte, 0, 1+len(rows)*20)
	b = append(b, snapshotFormat)
	var prev int64
	for _, r := range rows {
		at := r.createdAt.UnixMicro()
		b = binary.AppendUvarint(b, uint64(max(at-prev, 0)))
		prev = max(at, prev)
		if u, ok := uuidBytes(r.id); ok {
			b = append(b, 0)
			b = append(b, u[:]...)
		} else {
			b = append(b, 1)
			b = binary.AppendUvarint(b, uint64(len(r.id)))
			b = append(b, r.id...)
		}
	}
	return b
}

func decodeSnapshot(b []byte) ([]recentID, error) {
	if len(b) == 0 || b[0] != snapshotFormat {
		return nil, fmt.Errorf("poller: published-row snapshot of unknown format")
	}
	b = b[1:]
	var rows []recentID
	var at int64
	for len(b) > 0 {
		d, n := binary.Uvarint(b)
		if n <= 0 || len(b) < n+1 {
			return rows, fmt.Errorf("poller: truncated published-row snapshot")
		}
		at += int64(d)
		kind := b[n]
		b = b[n+1:]
		var id string
		switch kind {
		case 0:
			if len(b) < 16 {
				return rows, fmt.Errorf("poller: truncated published-row snapshot")
			}
			id = uuidString(b[:16])
			b = b[16:]
		case 1:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return rows, fmt.Errorf("poller: truncated published-row snapshot")
			}
			id = string(b[n : n+int(l)])
			b = b[n+int(l):]
		default:
			return rows, fmt.Errorf("poller: published-row snapshot: unknown id kind %d", kind)
		}
		rows = append(rows, recentID{id: id, createdAt: time.UnixMicro(at)})
	}
	return rows, nil
}

// uuidBytes parses a canonical lower-case UUID (the platform's activity
// ids); anything else (upper case included, so the id round-trips
// exactly) is not one.
func uuidBytes(s string) (u [16]byte, ok bool) {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	if strings.ToLower(s) != s {
		return u, false
	}
	h := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, false
	}
	return u, true
}

func uuidString(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
