package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Workspaces on several tenants: MOLECULE_PLATFORM_URLS and MOLECULE_ORG_IDS
// pair by position with MOLECULE_WORKSPACE_IDS, as MOLECULE_WORKSPACE_TOKENS
// does. The singular variables keep their meaning for MOLECULE_WORKSPACE_ID
// and, when the plural one is not set, for every workspace.

func invalid(name, format string, a ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, name, fmt.Sprintf(format, a...))
}

// baseURL checks a platform base URL and returns it without a trailing
// slash. A URL with user info is not echoed: it holds a credential.
func baseURL(raw string) (string, error) {
	raw = strings.TrimSpace(raw)
	if raw == "" {
		return "", fmt.Errorf("empty; the platform's base URL, e.g. https://acme.moleculesai.app")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%q is not an http(s) URL", raw)
	}
	if u.User != nil {
		return "", fmt.Errorf("holds user info (a credential in a URL); give the base URL only, tokens go in the token variables")
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q is not an http(s) base URL (no query or fragment)", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// validatePlatformURLs checks and normalises MOLECULE_PLATFORM_URL and
// every entry of MOLECULE_PLATFORM_URLS; at least one of them must be set.
func (c *Config) validatePlatformURLs() error {
	if c.PlatformURL != "" {
		u, err := baseURL(c.PlatformURL)
		if err != nil {
			return invalid("MOLECULE_PLATFORM_URL", "%v", err)
		}
		c.PlatformURL = u
	}
	for i, raw := range c.PlatformURLs {
		u, err := baseURL(raw)
		if err != nil {
			return invalid("MOLECULE_PLATFORM_URLS", "entry %d: %v", i+1, err)
		}
		c.PlatformURLs[i] = u
	}
	if c.PlatformURL == "" && len(c.PlatformURLs) == 0 && !c.WorkspaceRegistry {
		return invalid("MOLECULE_PLATFORM_URL", "not set; the platform's base URL, e.g. https://acme.moleculesai.app (or MOLECULE_PLATFORM_URLS, one per workspace of MOLECULE_WORKSPACE_IDS)")
	}
	return nil
}

// validateTenants checks the pairing of MOLECULE_PLATFORM_URLS and
// MOLECULE_ORG_IDS with MOLECULE_WORKSPACE_IDS, and that a singular
// variable set next to its plural one is used (by MOLECULE_WORKSPACE_ID)
// or consistent (one of the plural's entries): anything else would be
// silently ignored.
func (c *Config) validateTenants() error {
	if n := len(c.PlatformURLs); n > 0 {
		if n != len(c.WorkspaceIDs) {
			return invalid("MOLECULE_PLATFORM_URLS", "%d URLs for %d ids in MOLECULE_WORKSPACE_IDS; they pair by position, one platform base URL per workspace", n, len(c.WorkspaceIDs))
		}
		switch {
		case c.WorkspaceID != "" && c.PlatformURL == "":
			return invalid("MOLECULE_PLATFORM_URL", "not set for MOLECULE_WORKSPACE_ID %s; MOLECULE_PLATFORM_URLS pairs with MOLECULE_WORKSPACE_IDS only", c.WorkspaceID)
		case c.WorkspaceID == "" && c.PlatformURL != "" && !slices.Contains(c.PlatformURLs, c.PlatformURL):
			return invalid("MOLECULE_PLATFORM_URL", "%q is set together with MOLECULE_PLATFORM_URLS, which does not name it, and there is no MOLECULE_WORKSPACE_ID to use it; unset it (MOLECULE_PLATFORM_URLS gives each workspace its URL)", c.PlatformURL)
		}
	}
	if n := len(c.OrgIDs); n > 0 {
		for i := range c.OrgIDs {
			c.OrgIDs[i] = strings.TrimSpace(c.OrgIDs[i])
		}
		if n != len(c.WorkspaceIDs) {
			return invalid("MOLECULE_ORG_IDS", "%d org ids for %d ids in MOLECULE_WORKSPACE_IDS; they pair by position (leave an entry empty for a tenant without one)", n, len(c.WorkspaceIDs))
		}
		if c.WorkspaceID == "" && c.OrgID != "" && !slices.Contains(c.OrgIDs, c.OrgID) {
			return invalid("MOLECULE_ORG_ID", "%q is set together with MOLECULE_ORG_IDS, which does not name it, and there is no MOLECULE_WORKSPACE_ID to use it; unset it (MOLECULE_ORG_IDS gives each workspace its org id)", c.OrgID)
		}
	}
	// A tenant has one org id: two for one tenant is a list out of step.
	orgOf, firstOn := map[string]string{}, map[string]string{}
	for _, w := range c.Workspaces() {
		o, seen := orgOf[w.PlatformURL]
		if !seen {
			orgOf[w.PlatformURL], firstOn[w.PlatformURL] = w.OrgID, w.ID
			continue
		}
		if o != w.OrgID {
			return invalid("MOLECULE_ORG_IDS", "workspaces %s and %s are both on %s but have different org ids; a tenant has one org id", firstOn[w.PlatformURL], w.ID, w.PlatformURL)
		}
	}
	if len(c.OrgIDs) == 0 && c.OrgID != "" && len(orgOf) > 1 {
		return invalid("MOLECULE_ORG_ID", "one org id for the %d tenants of MOLECULE_PLATFORM_URLS; a tenant refuses another's org id: set MOLECULE_ORG_IDS, one per workspace of MOLECULE_WORKSPACE_IDS, paired by position", len(orgOf))
	}
	return nil
}
