package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// goreleaser is what .goreleaser.yaml says about the CLI's release assets.
type goreleaser struct {
	ProjectName string `yaml:"project_name"`
	Archives    []struct {
		ID           string
		Formats      []string
		NameTemplate string `yaml:"name_template"`
	}
	Checksum struct {
		NameTemplate string `yaml:"name_template"`
	}
}

func readGoreleaser(t *testing.T) goreleaser {
	t.Helper()
	data, err := os.ReadFile("../../.goreleaser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var g goreleaser
	if err := yaml.Unmarshal(data, &g); err != nil {
		t.Fatal(err)
	}
	return g
}

// cliArchive is the name goreleaser gives the CLI archive of tag for
// goos/goarch: its name template filled in as goreleaser fills it (the
// version is the tag without its v).
func (g goreleaser) cliArchive(t *testing.T, tag, goos, goarch string) string {
	t.Helper()
	for _, a := range g.Archives {
		if a.ID != "cli" {
			continue
		}
		if len(a.Formats) != 1 || a.Formats[0] != "tar.gz" {
			t.Fatalf(".goreleaser.yaml: the cli archive's formats are %v; install-relay.sh unpacks tar.gz", a.Formats)
		}
		name := strings.NewReplacer("{{ .ProjectName }}", g.ProjectName, "{{ .Version }}", strings.TrimPrefix(tag, "v"),
			"{{ .Os }}", goos, "{{ .Arch }}", goarch).Replace(a.NameTemplate)
		if strings.Contains(name, "{{") {
			t.Fatalf(".goreleaser.yaml: the cli archive's name %q uses a field this test does not fill", a.NameTemplate)
		}
		return name + ".tar.gz"
	}
	t.Fatal(".goreleaser.yaml has no archive with id cli")
	return ""
}

// One release, named alike everywhere: the chart's appVersion (its
// default image tag) is the version its version names, and every
// molecule-relay version the README (and docs/install.md and docs/ci.md,
// where its install and CI steps are), the chart's README, the Action, the
// GitLab example and the plain manifests (infra/k8s) name is that one, a tag goreleaser accepts (vX.Y.Z);
// install-relay.sh asks for goreleaser's archive and checksum names; and
// the image the release workflow pushes is the chart's and the
// Makefile's repository.
func TestReleaseNamesAgree(t *testing.T) {
	t.Parallel()
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile("../../" + path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var chart struct {
		Version    string
		AppVersion string `yaml:"appVersion"`
	}
	if err := yaml.Unmarshal([]byte(read("infra/helm/molecule-relay/Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	release := chart.AppVersion
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(release) || release != "v"+chart.Version {
		t.Fatalf("Chart.yaml: appVersion %q, version %q; want a tag vX.Y.Z and the chart's version without the v", release, chart.Version)
	}
	named := regexp.MustCompile(`molecule-relay[@:/](v\d+\.\d+\.\d+)|molecule-relay_(\d+\.\d+\.\d+)_|MOLECULE_RELAY_VERSION[=:] *"?(v\d+\.\d+\.\d+)`)
	for _, path := range []string{"README.md", "docs/install.md", "docs/ci.md", "infra/helm/molecule-relay/README.md", "action.yml", "infra/ci/gitlab-ci.example.yml",
		"infra/k8s/dispatcher.yaml", "infra/k8s/replier.yaml", "infra/k8s/poller-cronjob.yaml"} {
		n := 0
		for _, m := range named.FindAllStringSubmatch(read(path), -1) {
			v := m[1] + m[3]
			if m[2] != "" {
				v = "v" + m[2]
			}
			if n++; v != release {
				t.Errorf("%s names %q: the release is %s (Chart.yaml appVersion)", path, m[0], release)
			}
		}
		if n == 0 && path != "infra/helm/molecule-relay/README.md" {
			t.Errorf("%s names no molecule-relay release", path)
		}
	}

	g := readGoreleaser(t)
	script := read("infra/ci/install-relay.sh")
	if g.Checksum.NameTemplate != "checksums.txt" || !strings.Contains(script, "checksums.txt") {
		t.Errorf("goreleaser's checksum file is %q; install-relay.sh reads checksums.txt", g.Checksum.NameTemplate)
	}
	if got, want := g.cliArchive(t, release, "linux", "amd64"), "molecule-relay_"+strings.TrimPrefix(release, "v")+"_linux_amd64.tar.gz"; got != want ||
		!strings.Contains(script, `archive="molecule-relay_${tag#v}_${os}_${arch}.tar.gz"`) {
		t.Errorf("goreleaser names the archive %s; install-relay.sh asks for molecule-relay_${tag#v}_${os}_${arch}.tar.gz (%s)", got, want)
	}

	repo := regexp.MustCompile(`(?m)^\s*repository: (\S+)`).FindStringSubmatch(read("infra/helm/molecule-relay/values.yaml"))
	pushed := regexp.MustCompile(`KO_DOCKER_REPO: (\S+)`).FindStringSubmatch(read(".github/workflows/release.yml"))
	built := regexp.MustCompile(`(?m)^IMAGE_REPO\s*\?= (\S+)`).FindStringSubmatch(read("Makefile"))
	if repo == nil || pushed == nil || built == nil || repo[1] != pushed[1] || repo[1] != built[1] {
		t.Errorf("image repository: chart %v, release workflow %v, Makefile %v; want one", repo, pushed, built)
	}
}
