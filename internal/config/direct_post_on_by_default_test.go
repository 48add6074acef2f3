package config_test

import "testing"

// Direct posting is on unless MOLECULE_DIRECT_POST or --direct-post turns
// it off.
func TestDirectPostOnByDefault(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		environ []string
		want    bool
	}{
		{"default", nil, nil, true},
		{"environment off", nil, []string{"MOLECULE_DIRECT_POST=false"}, false},
		{"flag off", []string{"--direct-post=false"}, []string{"MOLECULE_DIRECT_POST=true"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := load(t, tc.args, tc.environ...)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.DirectPost != tc.want {
				t.Errorf("DirectPost = %v, want %v", cfg.DirectPost, tc.want)
			}
		})
	}
}
