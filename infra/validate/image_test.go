package validate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The image `make image` builds with ko (IMAGE_DIR): an OCI layout holding
// one index of linux/amd64 and linux/arm64 images whose entrypoint is the
// molecule-relay CLI and whose user is non-root, with an SPDX SBOM per
// platform that lists the relay's modules.
func TestKoImageLayoutAndSBOM(t *testing.T) {
	dir := os.Getenv("IMAGE_DIR")
	if dir == "" {
		t.Skip("IMAGE_DIR not set: run `make image`, which builds the image and runs this check")
	}
	lp, err := layout.FromPath(filepath.Join(dir, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil || len(tm.Manifests) != 1 {
		t.Fatalf("layout index: %v, %v; want one image index", tm, err)
	}
	idx, err := top.ImageIndex(tm.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	archs := map[string]bool{}
	for _, m := range im.Manifests {
		if m.Platform == nil {
			continue // an attached SBOM or attestation
		}
		archs[m.Platform.OS+"/"+m.Platform.Architecture] = true
		img, err := idx.Image(m.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImageConfig(t, m.Platform, img)
	}
	if len(archs) != 2 || !archs["linux/amd64"] || !archs["linux/arm64"] {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", archs)
	}
	for _, arch := range []string{"amd64", "arm64"} {
		b, err := os.ReadFile(filepath.Join(dir, "sbom", "molecule-relay-linux-"+arch+".spdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"spdxVersion": "SPDX-2.3"`, "github.com/nats-io/nats.go", "github.com/prometheus/client_golang"} {
			if !strings.Contains(string(b), want) {
				t.Errorf("%s SBOM lacks %s", arch, want)
			}
		}
	}
}

func checkImageConfig(t *testing.T, p *v1.Platform, img v1.Image) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if ep := cf.Config.Entrypoint; len(ep) != 1 || filepath.Base(ep[0]) != "molecule-relay" {
		t.Errorf("%s: entrypoint %v, want the molecule-relay CLI (the manifests pass only the stage as args)", p.Architecture, ep)
	}
	if u := cf.Config.User; u == "" || strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
		t.Errorf("%s: user %q, want non-root", p.Architecture, u)
	}
}
