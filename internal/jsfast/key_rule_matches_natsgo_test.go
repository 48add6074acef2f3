package jsfast

import (
	"regexp"
	"strings"
	"testing"
)

// natsgoKeyRe and natsgoKeyValid are nats.go's keyValid (jetstream/kv.go, v1.55.0).
var natsgoKeyRe = regexp.MustCompile(`^[-/_=\.a-zA-Z0-9]+$`)

func natsgoKeyValid(key string) bool {
	if len(key) == 0 || key[0] == '.' || key[len(key)-1] == '.' || strings.Contains(key, "..") {
		return false
	}
	return natsgoKeyRe.MatchString(key)
}

var keys = []string{
	"", ".", "..", "a", "a.b", "a..b", ".a", "a.", "ws-1.act_2", "a/b=c", "A-Z.0-9",
	"a*", "a>", "a b", "a\tb", "é", "$KV", "a.b.c.d", "a\x00", "x..", "9",
}

// The key check without a regular expression accepts and refuses
// exactly the keys nats.go's does.
func TestKeyRuleMatchesNatsGo(t *testing.T) {
	for _, k := range keys {
		if validKey(k) != natsgoKeyValid(k) {
			t.Errorf("%q: validKey %v, nats.go %v", k, validKey(k), natsgoKeyValid(k))
		}
	}
}

func FuzzKeyRuleMatchesNatsGo(f *testing.F) {
	for _, k := range keys {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if validKey(k) != natsgoKeyValid(k) {
			t.Errorf("%q: validKey %v, nats.go %v", k, validKey(k), natsgoKeyValid(k))
		}
	})
}
