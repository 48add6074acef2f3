package version

import "testing"

// A stamped version wins; an unstamped test binary (no module version in
// its build info) is "dev".
func TestStringPrefersTheStampedVersion(t *testing.T) {
	if got := String(); got != "dev" {
		t.Fatalf("unstamped String() = %q, want dev", got)
	}
	Version = "v1.2.3"
	defer func() { Version = "" }()
	if got := String(); got != "v1.2.3" {
		t.Fatalf("stamped String() = %q, want v1.2.3", got)
	}
}
