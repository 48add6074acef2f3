package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/config"
)

const (
	wsC  = "c0ffee00-0000-4000-8000-000000000003"
	tokB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

func validated(t *testing.T, environ ...string) (*config.Config, error) {
	t.Helper()
	cfg, err := load(t, nil, environ...)
	if err != nil {
		return nil, err
	}
	return cfg, cfg.Validate(config.NeedPlatform)
}

// MOLECULE_PLATFORM_URLS and MOLECULE_ORG_IDS pair by position with
// MOLECULE_WORKSPACE_IDS, as the tokens do; MOLECULE_WORKSPACE_ID keeps
// MOLECULE_PLATFORM_URL and MOLECULE_ORG_ID.
func TestPlatformURLsPairWithWorkspaceIDs(t *testing.T) {
	cfg, err := validated(t,
		"MOLECULE_PLATFORM_URL=https://solo.example/", "MOLECULE_ORG_ID=org-solo",
		"MOLECULE_WORKSPACE_ID="+wsC, "MOLECULE_WORKSPACE_TOKEN=t0",
		"MOLECULE_WORKSPACE_IDS="+wsA+","+wsB, "MOLECULE_WORKSPACE_TOKENS="+tokA+","+tokB,
		"MOLECULE_PLATFORM_URLS=https://a.example/, http://127.0.0.1:9",
		"MOLECULE_ORG_IDS=org-a,")
	if err != nil {
		t.Fatal(err)
	}
	want := []config.Workspace{
		{ID: wsC, Token: "t0", PlatformURL: "https://solo.example", OrgID: "org-solo"},
		{ID: wsA, Token: tokA, PlatformURL: "https://a.example", OrgID: "org-a"},
		{ID: wsB, Token: tokB, PlatformURL: "http://127.0.0.1:9", OrgID: ""},
	}
	got := cfg.Workspaces()
	if len(got) != len(want) {
		t.Fatalf("workspaces %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("workspace %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// Without the plural variables every workspace is on MOLECULE_PLATFORM_URL
// with MOLECULE_ORG_ID, as before.
func TestPlatformURLAloneServesEveryWorkspace(t *testing.T) {
	cfg, err := validated(t, "MOLECULE_PLATFORM_URL=https://acme.example/", "MOLECULE_ORG_ID=org",
		"MOLECULE_WORKSPACE_IDS="+wsA+","+wsB, "MOLECULE_WORKSPACE_TOKENS="+tokA+","+tokB)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range cfg.Workspaces() {
		if w.PlatformURL != "https://acme.example" || w.OrgID != "org" {
			t.Errorf("workspace %s on %q with org %q; want https://acme.example, org", w.ID, w.PlatformURL, w.OrgID)
		}
	}
}

// Both the singular and the plural variable set: accepted when the
// singular one is used (by MOLECULE_WORKSPACE_ID) or is one of the plural's
// entries; refused when it would be silently ignored.
func TestSingularAndPluralTogether(t *testing.T) {
	ids := []string{"MOLECULE_WORKSPACE_IDS=" + wsA + "," + wsB, "MOLECULE_WORKSPACE_TOKENS=" + tokA + "," + tokB}
	for _, tc := range []struct {
		name    string
		environ []string
		want    string // "" accepted
	}{
		{"url among the urls", []string{"MOLECULE_PLATFORM_URL=https://a.example/", "MOLECULE_PLATFORM_URLS=https://a.example,https://b.example"}, ""},
		{"url used by the single workspace", []string{"MOLECULE_PLATFORM_URL=https://c.example", "MOLECULE_PLATFORM_URLS=https://a.example,https://b.example",
			"MOLECULE_WORKSPACE_ID=" + wsC, "MOLECULE_WORKSPACE_TOKEN=t0"}, ""},
		{"url ignored", []string{"MOLECULE_PLATFORM_URL=https://c.example", "MOLECULE_PLATFORM_URLS=https://a.example,https://b.example"}, "MOLECULE_PLATFORM_URL:"},
		{"single workspace without a url", []string{"MOLECULE_PLATFORM_URLS=https://a.example,https://b.example",
			"MOLECULE_WORKSPACE_ID=" + wsC, "MOLECULE_WORKSPACE_TOKEN=t0"}, "MOLECULE_PLATFORM_URL:"},
		{"org among the orgs", []string{"MOLECULE_PLATFORM_URLS=https://a.example,https://b.example", "MOLECULE_ORG_ID=oa", "MOLECULE_ORG_IDS=oa,ob"}, ""},
		{"org ignored", []string{"MOLECULE_PLATFORM_URLS=https://a.example,https://b.example", "MOLECULE_ORG_ID=oc", "MOLECULE_ORG_IDS=oa,ob"}, "MOLECULE_ORG_ID:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := validated(t, append(tc.environ, ids...)...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v; want ErrInvalid naming %s", err, tc.want)
			}
		})
	}
}

// A count mismatch, a bad entry or an org id that cannot be right is a
// configuration error naming the variables and the counts, never a token.
func TestTenantValidationNamesTheVariable(t *testing.T) {
	ids := []string{"MOLECULE_WORKSPACE_IDS=" + wsA + "," + wsB, "MOLECULE_WORKSPACE_TOKENS=" + tokA + "," + tokB}
	for _, tc := range []struct {
		name    string
		environ []string
		want    []string
	}{
		{"fewer urls", []string{"MOLECULE_PLATFORM_URLS=https://a.example"},
			[]string{"MOLECULE_PLATFORM_URLS", "1 URLs for 2 ids in MOLECULE_WORKSPACE_IDS"}},
		{"more urls", []string{"MOLECULE_PLATFORM_URLS=https://a.example,https://b.example,https://c.example"},
			[]string{"MOLECULE_PLATFORM_URLS", "3 URLs for 2 ids in MOLECULE_WORKSPACE_IDS"}},
		{"bad url entry", []string{"MOLECULE_PLATFORM_URLS=https://a.example,ftp://b.example"},
			[]string{"MOLECULE_PLATFORM_URLS", "entry 2"}},
		{"empty url entry", []string{"MOLECULE_PLATFORM_URLS=https://a.example,"},
			[]string{"MOLECULE_PLATFORM_URLS", "entry 2", "empty"}},
		{"url with a query", []string{"MOLECULE_PLATFORM_URLS=https://a.example,https://b.example/?x=1"},
			[]string{"MOLECULE_PLATFORM_URLS", "entry 2"}},
		{"fewer org ids", []string{"MOLECULE_PLATFORM_URLS=https://a.example,https://b.example", "MOLECULE_ORG_IDS=oa"},
			[]string{"MOLECULE_ORG_IDS", "1 org ids for 2 ids in MOLECULE_WORKSPACE_IDS"}},
		{"one org id for two tenants", []string{"MOLECULE_PLATFORM_URLS=https://a.example,https://b.example", "MOLECULE_ORG_ID=oa"},
			[]string{"MOLECULE_ORG_ID:", "MOLECULE_ORG_IDS"}},
		{"two org ids on one tenant", []string{"MOLECULE_PLATFORM_URL=https://a.example", "MOLECULE_ORG_IDS=oa,ob"},
			[]string{"MOLECULE_ORG_IDS", "both on https://a.example"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := validated(t, append(tc.environ, ids...)...)
			if err == nil || !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("error %v; want ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), tokA) || strings.Contains(err.Error(), tokB) {
				t.Fatal("error leaks a token")
			}
		})
	}
}

// A URL with user info holds a credential: refused without echoing it.
func TestPlatformURLWithUserInfoIsNotEchoed(t *testing.T) {
	for _, v := range []string{"MOLECULE_PLATFORM_URL", "MOLECULE_PLATFORM_URLS"} {
		_, err := validated(t, v+"=https://me:s3cret@a.example", "MOLECULE_WORKSPACE_IDS="+wsA, "MOLECULE_WORKSPACE_TOKENS="+tokA)
		if err == nil || !strings.Contains(err.Error(), v+":") {
			t.Fatalf("%s: error %v; want one naming it", v, err)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("%s: error echoes the URL's password: %v", v, err)
		}
	}
}
