package molecule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/molecule-ai/molecule-relay/pkg/molecule/internal/jsonread"
)

// Reading an activity page.
//
// A poller reads several rows per message relayed and drops most of them
// unparsed: its own notifies, and the rows a re-read meets again
// (docs/performance.md, "What a burst's re-reads read"). So the page is
// read in one pass (jsonread.SplitArray validates it as json.Valid does
// and splits it into rows and their top-level members), a row keeps only
// id, method and created_at, and those cost no allocation of their own:
// created_at is read from its bytes (jsonread.UTCTime), and the ids and
// methods of a page share one string. A row is split into its members
// only when ActivityRow.Parse asks.

// readPage reads an activity body into its rows, in the platform's
// order. Anything but a valid array takes encoding/json's path, for its
// error.
func readPage(r request, body []byte, limit int) ([]ActivityRow, error) {
	// The rows as read, until their number is known; a short page's stay
	// on the stack.
	var readBuf [32]rowRead
	read := readBuf[:0]
	if n := min(limit, len(body)/minRowBytes); n > len(readBuf) {
		read = make([]rowRead, 0, n)
	}
	var cur rowRead
	member := func(key, val []byte) {
		if bytes.IndexByte(key, '\\') >= 0 {
			key = []byte(unquote(append(append([]byte{'"'}, key...), '"'))) // an escaped key, compared decoded
		}
		var dst *[]byte
		switch string(key) { // a conversion that does not allocate
		case "id":
			dst = &cur.id
		case "method":
			dst = &cur.method
		case "created_at":
			dst = &cur.createdAt
		case "seq":
			cur.seq = val // a number, or anything else, read by seqValue
			return
		default:
			return
		}
		*dst = nil
		if val[0] == '"' {
			*dst = val
		}
	}
	elem := func(raw []byte) bool {
		cur.raw = raw
		read = append(read, cur)
		cur = rowRead{}
		return true
	}
	if jsonread.SplitArray(body, elem, member) {
		return pageRows(read), nil
	}
	var raws []json.RawMessage
	if err := decodeJSON(r, body, &raws); err != nil {
		return nil, err
	}
	// Valid JSON that is not a list (null decodes into a nil slice
	// without error).
	return nil, fmt.Errorf("%w: %s %s: response body is not a JSON array", ErrPlatformUnavailable, r.method, r.path)
}

// minRowBytes is about the smallest row the platform writes (id,
// created_at and the other columns, most of them null): a page holds at
// most len(body)/minRowBytes rows.
const minRowBytes = 256

// rowRead is a row as the page's scan leaves it: its bytes, and its id,
// method and created_at string literals, quotes included (nil when
// absent or not a string, as the last of a repeated key), and its seq
// value.
type rowRead struct{ raw, id, method, createdAt, seq []byte }

// createdAt reads a created_at literal as time.Parse(time.RFC3339Nano)
// does; zero when it does not parse.
func createdAt(lit []byte) time.Time {
	if t, ok := jsonread.UTCTime(lit[1 : len(lit)-1]); ok {
		return t
	}
	t, err := time.Parse(time.RFC3339Nano, unquote(lit))
	if err != nil {
		return time.Time{}
	}
	return t
}

// pageRows makes the rows of a page. Plain id and method literals (no
// escape, valid UTF-8, as the platform writes them) are copied into one
// string for the page, and every ID and Method is a piece of it: one
// allocation per page, not two per row.
func pageRows(read []rowRead) []ActivityRow {
	n := 0
	for _, r := range read {
		n += len(r.id) + len(r.method)
	}
	var b strings.Builder
	b.Grow(n)
	for _, r := range read {
		for _, lit := range [2][]byte{r.id, r.method} {
			if plainLiteral(lit) {
				b.Write(lit[1 : len(lit)-1])
			}
		}
	}
	all, off := b.String(), 0
	str := func(lit []byte) string {
		switch {
		case lit == nil:
			return ""
		case !plainLiteral(lit):
			return unquote(lit)
		}
		s := all[off : off+len(lit)-2]
		off += len(lit) - 2
		return s
	}
	rows := make([]ActivityRow, len(read))
	for i, r := range read {
		rows[i] = ActivityRow{ID: str(r.id), Method: str(r.method), Seq: seqValue(r.seq), JSON: r.raw, valid: true}
		if r.createdAt != nil {
			rows[i].CreatedAt = createdAt(r.createdAt)
		}
	}
	return rows
}

// plainLiteral: a string literal unquote takes as it is.
func plainLiteral(lit []byte) bool {
	if lit == nil {
		return false
	}
	inner := lit[1 : len(lit)-1]
	return bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner)
}
