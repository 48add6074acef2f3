// Command localbase runs a command (ko build) against a base image served
// from an in-memory registry on 127.0.0.1, for CI machines that reach the
// Go module proxy but no container registry. The base is a two-platform
// (linux/amd64, linux/arm64) index of one layer: /etc/passwd and
// /etc/group with the nonroot user 65532 (as distroless :nonroot), the
// host's CA bundle, and /tmp; its config runs as 65532. The command gets
// KO_DEFAULTBASEIMAGE set to it.
//
// It proves the build, not the production base: a release build uses the
// distroless base of .ko.yaml.
//
//	go run ./cmd/localbase -- ko build --push=false --tarball image.tar ./cmd/molecule-relay
package main

import (
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		log.Fatal("usage: localbase -- COMMAND [ARG...]")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: registry.New(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	ref := fmt.Sprintf("%s/base:nonroot", ln.Addr())
	if err := pushBase(ref); err != nil {
		log.Fatalf("base image %s: %v", ref, err)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "KO_DEFAULTBASEIMAGE="+ref)
	err = cmd.Run()
	_ = srv.Close()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		log.Fatal(err)
	}
}

// pushBase writes the two-platform base index to ref.
func pushBase(ref string) error {
	files := map[string][]byte{
		"etc/passwd": []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		"etc/group":  []byte("root:x:0:\nnonroot:x:65532:\n"),
	}
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files["etc/ssl/certs/ca-certificates.crt"] = ca
	}
	layer, err := crane.Layer(files)
	if err != nil {
		return err
	}
	idx := v1.ImageIndex(empty.Index)
	for _, arch := range []string{"amd64", "arm64"} {
		img, err := mutate.AppendLayers(empty.Image, layer)
		if err != nil {
			return err
		}
		img, err = mutate.ConfigFile(img, &v1.ConfigFile{
			OS: "linux", Architecture: arch,
			Config: v1.Config{User: "65532:65532", Env: []string{"PATH=/usr/local/bin:/usr/bin:/bin", "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}},
			RootFS: v1.RootFS{Type: "layers"},
		})
		if err != nil {
			return err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: arch}}})
	}
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		return err
	}
	return remote.WriteIndex(r, idx)
}
