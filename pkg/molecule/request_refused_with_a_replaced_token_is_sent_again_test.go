package molecule_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
)

// TestRequestRefusedWithAReplacedTokenIsSentAgain: a request out with the
// old token while SetToken replaces it, refused with 401, is sent once
// more with the new token; a 401 with the current token is returned as
// is; an empty token is refused and changes nothing.
func TestRequestRefusedWithAReplacedTokenIsSentAgain(t *testing.T) {
	var (
		mu   sync.Mutex
		seen []string
		c    *molecule.Client
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		mu.Lock()
		seen = append(seen, auth)
		mu.Unlock()
		if auth != "Bearer new-token" {
			if len(seen) == 1 {
				_ = c.SetToken("new-token") // the registry's change lands while this request is out
			}
			http.Error(w, `{"error":"invalid workspace auth token"}`, http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`[]`))
	}))
	defer srv.Close()
	var err error
	c, err = molecule.New(molecule.Config{PlatformURL: srv.URL, WorkspaceID: "ws-1", Token: "old-token", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if g, err := c.Probe(context.Background()); err != nil || g != molecule.GenerationOld {
		t.Fatalf("probe: %v %v; want it answered with the new token", g, err)
	}
	if len(seen) != 2 || seen[0] != "Bearer old-token" || seen[1] != "Bearer new-token" {
		t.Fatalf("requests carried %q; want the old token, then the new", seen)
	}
	if err := c.SetToken(""); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("SetToken(\"\"): %v", err)
	}
	if err := c.SetToken("bad token"); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Fatalf("SetToken with a space: %v", err)
	}
	if _, err := c.Probe(context.Background()); err != nil {
		t.Fatalf("after refused SetTokens the new token stays: %v", err)
	}
}
