package molecule

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// A body over the cap yields exactly max bytes and then the cap's error,
// on every read after it too: never a byte past the cap, never a negative
// count (the upload body's own copy returned -1 on the read after).
func TestCappedReaderStopsAtTheCap(t *testing.T) {
	errCap := errors.New("over the cap")
	for _, src := range []io.Reader{strings.NewReader("0123456789"), iotest.OneByteReader(strings.NewReader("0123456789"))} {
		c := &cappedReader{r: src, max: 4, err: errCap}
		got, err := io.ReadAll(c)
		if string(got) != "0123" || !errors.Is(err, errCap) {
			t.Errorf("ReadAll = %q, %v; want the first 4 bytes and the cap's error", got, err)
		}
		if n, err := c.Read(make([]byte, 8)); n != 0 || !errors.Is(err, errCap) {
			t.Errorf("read after the cap = %d, %v; want 0 and the cap's error", n, err)
		}
	}
	c := &cappedReader{r: strings.NewReader("0123"), max: 4, err: errCap}
	if got, err := io.ReadAll(c); string(got) != "0123" || err != nil {
		t.Errorf("a body of exactly max bytes: %q, %v", got, err)
	}
}
