package molecule_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/pkg/molecule"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// entry is one tar entry of a test archive.
type entry struct {
	name     string
	typ      byte
	body     string
	mode     int64
	linkname string
}

func file(name, body string) entry {
	return entry{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }

// tgz builds a gzip tar archive.
func tgz(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.linkname, Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.typ == tar.TypeXGlobalHeader {
			h.PAXRecords = map[string]string{"comment": "global"}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("header %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// pluginServer serves archives by plugin name and records requests.
type pluginServer struct {
	*httptest.Server
	mu       sync.Mutex
	archives map[string][]byte
	status   int    // non-zero: answer this status with body
	body     string // for status
	chunked  bool   // stream without Content-Length
	hits     atomic.Int32
	last     *http.Request
}

func newPluginServer(t *testing.T) *pluginServer {
	ps := &pluginServer{archives: map[string][]byte{}}
	ps.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ps.hits.Add(1)
		ps.mu.Lock()
		defer ps.mu.Unlock()
		ps.last = r.Clone(context.Background())
		if ps.status != 0 {
			w.WriteHeader(ps.status)
			_, _ = w.Write([]byte(ps.body))
			return
		}
		const prefix = "/workspaces/ws-1/plugins/"
		rest, ok := strings.CutPrefix(r.URL.Path, prefix)
		name, ok2 := strings.CutSuffix(rest, "/download")
		if !ok || !ok2 || r.Method != http.MethodGet {
			http.Error(w, `{"error":"no route"}`, http.StatusNotFound)
			return
		}
		a, ok := ps.archives[name]
		if !ok {
			http.Error(w, `{"error":"plugin not found"}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/gzip")
		w.Header().Set("X-Plugin-Name", name)
		src := r.URL.Query().Get("source")
		if src == "" {
			src = "local://" + name
		}
		w.Header().Set("X-Plugin-Source", src)
		if ps.chunked {
			for i := 0; i < len(a); i += 512 {
				_, _ = w.Write(a[i:min(i+512, len(a))])
				w.(http.Flusher).Flush()
			}
			return
		}
		http.ServeContent(w, r, name+".tar.gz", time.Time{}, bytes.NewReader(a))
	}))
	t.Cleanup(ps.Close)
	return ps
}

func (ps *pluginServer) set(name string, a []byte) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	ps.archives[name] = a
}

func (ps *pluginServer) client(t *testing.T, org string) *molecule.Client {
	t.Helper()
	c, err := molecule.New(molecule.Config{PlatformURL: ps.URL, WorkspaceID: "ws-1", Token: "tok-123", OrgID: org, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// dirNames lists a directory's entries.
func dirNames(t *testing.T, d string) []string {
	t.Helper()
	es, err := os.ReadDir(d)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

func readTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out[filepath.ToSlash(rel)+"/"] = info.Mode().Perm().String()
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = info.Mode().Perm().String() + " " + string(b)
		default:
			out[filepath.ToSlash(rel)] = "UNEXPECTED " + info.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestInstallPlugin(t *testing.T) {
	ps := newPluginServer(t)
	exe := file("bin/setup.sh", "#!/bin/sh\necho hi\n")
	exe.mode = 0o4777 // setuid and world-writable: reduced to 0755
	private := file("docs/secret.md", "s")
	private.mode = 0o600
	ps.set("my-plugin", tgz(t,
		entry{name: "pax_global_header", typ: tar.TypeXGlobalHeader},
		dir("./"),
		file("plugin.yaml", "name: my-plugin\n"),
		dir("skills/"),
		file("skills/a/SKILL.md", "# A\n"),
		exe,
		private,
		file("./x/../y.txt", "cleaned"),
	))
	plugins := filepath.Join(t.TempDir(), "plugins")
	c := ps.client(t, "org-9")

	got, err := c.InstallPlugin(context.Background(), "my-plugin", molecule.PluginOptions{Dir: plugins, Source: "github://acme/p#v1"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"./":                "-rwxr-xr-x",
		"plugin.yaml":       "-rw-r--r-- name: my-plugin\n",
		"skills/":           "-rwxr-xr-x",
		"skills/a/":         "-rwxr-xr-x",
		"skills/a/SKILL.md": "-rw-r--r-- # A\n",
		"bin/":              "-rwxr-xr-x",
		"bin/setup.sh":      "-rwxr-xr-x #!/bin/sh\necho hi\n",
		"docs/":             "-rwxr-xr-x",
		"docs/secret.md":    "-rw-r--r-- s",
		"y.txt":             "-rw-r--r-- cleaned",
	}
	tree := readTree(t, filepath.Join(plugins, "my-plugin"))
	if len(tree) != len(want) {
		t.Errorf("tree = %v", tree)
	}
	for k, v := range want {
		if tree[k] != v {
			t.Errorf("%s = %q, want %q", k, tree[k], v)
		}
	}
	sum, err := molecule.PluginHash(filepath.Join(plugins, "my-plugin"))
	if err != nil {
		t.Fatal(err)
	}
	wantInfo := molecule.InstalledPlugin{
		Name: "my-plugin", Path: filepath.Join(plugins, "my-plugin"), Source: "github://acme/p#v1",
		SHA256: sum, Files: 5, Bytes: int64(len("name: my-plugin\n# A\n#!/bin/sh\necho hi\nscleaned")),
	}
	if *got != wantInfo {
		t.Errorf("InstalledPlugin = %+v, want %+v", *got, wantInfo)
	}
	if names := dirNames(t, plugins); len(names) != 1 || names[0] != "my-plugin" {
		t.Errorf("plugins dir holds %v, want only my-plugin", names)
	}

	r := ps.last
	if r.URL.Path != "/workspaces/ws-1/plugins/my-plugin/download" || r.URL.Query().Get("source") != "github://acme/p#v1" {
		t.Errorf("request %s", r.URL)
	}
	for k, v := range map[string]string{
		"Authorization": "Bearer tok-123", "X-Molecule-Org-Id": "org-9", "Origin": ps.URL,
	} {
		if r.Header.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, r.Header.Get(k), v)
		}
	}

	// Same again with the expected hash: a verified replace.
	got2, err := c.InstallPlugin(context.Background(), "my-plugin", molecule.PluginOptions{Dir: plugins, ExpectedSHA256: strings.ToUpper(sum)})
	if err != nil {
		t.Fatal(err)
	}
	if !got2.Replaced || got2.SHA256 != sum || got2.Source != "local://my-plugin" {
		t.Errorf("second install = %+v", got2)
	}
	if ps.last.URL.RawQuery != "" {
		t.Errorf("source sent without being set: %q", ps.last.URL.RawQuery)
	}
}

func TestInstallPluginNoTenantHeadersWithoutOrg(t *testing.T) {
	ps := newPluginServer(t)
	ps.set("p", tgz(t, file("a", "b")))
	if _, err := ps.client(t, "").InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if ps.last.Header.Get("X-Molecule-Org-Id") != "" || ps.last.Header.Get("Origin") != "" {
		t.Fatalf("tenant headers sent without an org: %v", ps.last.Header)
	}
}

func TestInstallPluginRefusesUnsafeArchives(t *testing.T) {
	tests := []struct {
		name  string
		bad   entry
		entry string // named in the error
	}{
		{"absolute path", file("/etc/evil", "x"), "/etc/evil"},
		{"parent escape", file("../evil", "x"), "../evil"},
		{"nested parent escape", file("a/b/../../../evil", "x"), "a/b/../../../evil"},
		{"dot then parent", file("./../evil", "x"), "./../evil"},
		{"bare parent dir", dir("../"), "../"},
		{"backslash escape", file(`..\evil`, "x"), `..\\evil`},
		{"symlink", entry{name: "link", typ: tar.TypeSymlink, linkname: "/etc/passwd"}, "link"},
		{"relative symlink", entry{name: "a/link", typ: tar.TypeSymlink, linkname: "../../x"}, "a/link"},
		{"hard link", entry{name: "hard", typ: tar.TypeLink, linkname: "plugin.yaml"}, "hard"},
		{"char device", entry{name: "dev", typ: tar.TypeChar}, "dev"},
		{"block device", entry{name: "blk", typ: tar.TypeBlock}, "blk"},
		{"fifo", entry{name: "pipe", typ: tar.TypeFifo}, "pipe"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := newPluginServer(t)
			// A good file first, so a partial extraction would be visible.
			ps.set("p", tgz(t, file("plugin.yaml", "name: p\n"), file("ok/first.txt", "1"), tc.bad, file("after.txt", "2")))
			plugins := t.TempDir()
			// An existing install must survive the failed replace.
			if err := os.MkdirAll(filepath.Join(plugins, "p"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(plugins, "p", "old.txt"), []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ps.client(t, "").InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: plugins})
			if !errors.Is(err, molecule.ErrUnsafeArchive) {
				t.Fatalf("err = %v, want ErrUnsafeArchive", err)
			}
			if !strings.Contains(err.Error(), `"`+tc.entry+`"`) {
				t.Errorf("error %q does not name entry %q", err, tc.entry)
			}
			if names := dirNames(t, plugins); len(names) != 1 || names[0] != "p" {
				t.Errorf("plugins dir holds %v after a refused install", names)
			}
			if tree := readTree(t, filepath.Join(plugins, "p")); len(tree) != 2 || tree["old.txt"] != "-rw-r--r-- old" {
				t.Errorf("existing install changed: %v", tree)
			}
			if _, err := os.Lstat(filepath.Join(filepath.Dir(plugins), "evil")); err == nil {
				t.Errorf("an entry escaped the plugins directory")
			}
		})
	}
}

func TestInstallPluginCaps(t *testing.T) {
	big := strings.Repeat("0", 4096) // compresses to a few bytes
	many := []entry{}
	for i := 0; i < 6; i++ {
		many = append(many, file(string(rune('a'+i))+".txt", "x"))
	}
	tests := []struct {
		name    string
		archive func(t *testing.T) []byte
		chunked bool
		opts    molecule.PluginOptions
		msg     string
	}{
		{"extracted bytes over cap", func(t *testing.T) []byte { return tgz(t, file("a", big), file("b", big)) }, false, molecule.PluginOptions{MaxBytes: 6000}, "extracted content exceeds 6000 bytes at entry \"b\""},
		{"single entry over cap", func(t *testing.T) []byte { return tgz(t, file("a", big+big)) }, false, molecule.PluginOptions{MaxBytes: 6000}, "extracted content exceeds 6000 bytes at entry \"a\""},
		{"download over cap (Content-Length)", func(t *testing.T) []byte { return tgz(t, file("a", big)) }, false, molecule.PluginOptions{MaxBytes: 40}, "cap 40"},
		{"download over cap (streamed)", func(t *testing.T) []byte {
			// A tiny tar, then a second gzip member of incompressible
			// bytes: the extracted content stays small, the stream does not.
			b := make([]byte, 8192)
			x := uint32(1)
			for i := range b {
				x ^= x << 13
				x ^= x >> 17
				x ^= x << 5
				b[i] = byte(x)
			}
			return append(tgz(t, file("a", "b")), gzipOf(t, b)...)
		}, true, molecule.PluginOptions{MaxBytes: 4096}, "archive exceeds 4096 bytes"},
		{"entries over cap", func(t *testing.T) []byte { return tgz(t, many...) }, false, molecule.PluginOptions{MaxEntries: 5}, "more than 5 entries"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := newPluginServer(t)
			ps.chunked = tc.chunked
			ps.set("p", tc.archive(t))
			plugins := t.TempDir()
			tc.opts.Dir = plugins
			_, err := ps.client(t, "").InstallPlugin(context.Background(), "p", tc.opts)
			if !errors.Is(err, molecule.ErrPluginTooLarge) {
				t.Fatalf("err = %v, want ErrPluginTooLarge", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err = %q, want it to say %q", err, tc.msg)
			}
			if names := dirNames(t, plugins); len(names) != 0 {
				t.Errorf("plugins dir holds %v after a refused install", names)
			}
		})
	}
	// Exactly at the caps is fine.
	ps := newPluginServer(t)
	ps.set("p", tgz(t, many[:5]...))
	if _, err := ps.client(t, "").InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: t.TempDir(), MaxEntries: 5, MaxBytes: 5 + 4096}); err != nil {
		t.Fatalf("at the caps: %v", err)
	}
}

func TestInstallPluginAtomicReplace(t *testing.T) {
	ps := newPluginServer(t)
	plugins := t.TempDir()
	c := ps.client(t, "")
	ps.set("p", tgz(t, file("plugin.yaml", "v: 1\n"), file("only-in-v1.txt", "1"), file("shared.txt", "one")))
	first, err := c.InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: plugins})
	if err != nil {
		t.Fatal(err)
	}
	if first.Replaced {
		t.Error("first install reported Replaced")
	}
	ps.set("p", tgz(t, file("plugin.yaml", "v: 2\n"), file("shared.txt", "two")))
	second, err := c.InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: plugins})
	if err != nil {
		t.Fatal(err)
	}
	if !second.Replaced || second.SHA256 == first.SHA256 {
		t.Errorf("second = %+v", second)
	}
	tree := readTree(t, filepath.Join(plugins, "p"))
	want := map[string]string{"./": "-rwxr-xr-x", "plugin.yaml": "-rw-r--r-- v: 2\n", "shared.txt": "-rw-r--r-- two"}
	if len(tree) != len(want) {
		t.Errorf("tree = %v, want %v", tree, want)
	}
	for k, v := range want {
		if tree[k] != v {
			t.Errorf("%s = %q, want %q", k, tree[k], v)
		}
	}
	if names := dirNames(t, plugins); len(names) != 1 {
		t.Errorf("leftovers in the plugins dir: %v", names)
	}
}

func TestInstallPluginHashMismatch(t *testing.T) {
	ps := newPluginServer(t)
	ps.set("p", tgz(t, file("plugin.yaml", "sha256: x\n"), file("rules.md", "- be kind\n")))
	plugins := t.TempDir()
	c := ps.client(t, "")
	// The Python SDK's hash of {rules.md: "- be kind\n"}, from gen.py's "single file" vector.
	const good = "ff91f2bec2a6422fa720b98228c6fcb9d3452876c60d4052377a69d5de57ed7a"
	_, err := c.InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: plugins, ExpectedSHA256: strings.Repeat("0", 64)})
	if !errors.Is(err, molecule.ErrPluginHashMismatch) {
		t.Fatalf("err = %v, want ErrPluginHashMismatch", err)
	}
	if !strings.Contains(err.Error(), good) {
		t.Errorf("error %q does not give the actual hash", err)
	}
	if names := dirNames(t, plugins); len(names) != 0 {
		t.Fatalf("installed despite the mismatch: %v", names)
	}
	got, err := c.InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: plugins, ExpectedSHA256: good})
	if err != nil {
		t.Fatalf("with the right hash: %v", err)
	}
	if got.SHA256 != good {
		t.Fatalf("SHA256 = %s", got.SHA256)
	}
}

func TestInstallPluginInvalidArguments(t *testing.T) {
	ps := newPluginServer(t)
	c := ps.client(t, "")
	plugins := t.TempDir()
	for _, name := range []string{"", ".", "..", "a/b", "../x", "a b", "ü", "a\x00", strings.Repeat("a", 256)} {
		if _, err := c.InstallPlugin(context.Background(), name, molecule.PluginOptions{Dir: plugins}); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Errorf("name %q: err = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := c.InstallPlugin(context.Background(), "ok", molecule.PluginOptions{}); !errors.Is(err, molecule.ErrInvalidArgument) {
		t.Errorf("no Dir: err = %v", err)
	}
	for _, h := range []string{"abc", strings.Repeat("g", 64), strings.Repeat("0", 63)} {
		if _, err := c.InstallPlugin(context.Background(), "ok", molecule.PluginOptions{Dir: plugins, ExpectedSHA256: h}); !errors.Is(err, molecule.ErrInvalidArgument) {
			t.Errorf("hash %q: err = %v", h, err)
		}
	}
	if n := ps.hits.Load(); n != 0 {
		t.Errorf("%d requests made for invalid arguments", n)
	}
	// Names the platform allows are accepted.
	ps.set("Good_name-1.2", tgz(t, file("a", "b")))
	if _, err := c.InstallPlugin(context.Background(), "Good_name-1.2", molecule.PluginOptions{Dir: plugins}); err != nil {
		t.Errorf("valid name refused: %v", err)
	}
}

func TestInstallPluginAPIErrors(t *testing.T) {
	tests := []struct {
		status int
		body   string
		want   error
	}{
		{404, `{"error":"plugin not found"}`, molecule.ErrNotFound},
		{404, ``, molecule.ErrTenantRouting},
		{401, `{"error":"invalid workspace auth token"}`, molecule.ErrUnauthorized},
		{413, `{"error":"plugin exceeds 104857600 bytes"}`, molecule.ErrPluginTooLarge},
		{429, `{"error":"rate limit exceeded","retry_after":7}`, molecule.ErrRateLimited},
		{503, `{"error":"platform datastore unavailable","code":"platform_unavailable"}`, molecule.ErrPlatformUnavailable},
		{422, `{"error":"unpinned github source"}`, nil},
	}
	for _, tc := range tests {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			ps := newPluginServer(t)
			ps.status, ps.body = tc.status, tc.body
			plugins := t.TempDir()
			_, err := ps.client(t, "").InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: plugins})
			var ae *molecule.APIError
			if !errors.As(err, &ae) {
				t.Fatalf("err = %v (%T), want *APIError", err, err)
			}
			if ae.StatusCode != tc.status || ae.Method != "GET" || ae.Path != "/workspaces/ws-1/plugins/p/download" || ae.Body != tc.body {
				t.Errorf("APIError = %+v", ae)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
			if tc.status == 429 && ae.RetryAfter.Seconds() != 7 {
				t.Errorf("RetryAfter = %v", ae.RetryAfter)
			}
			if names := dirNames(t, plugins); len(names) != 0 {
				t.Errorf("plugins dir holds %v", names)
			}
		})
	}
}

func TestInstallPluginCorruptArchives(t *testing.T) {
	good := tgz(t, file("plugin.yaml", "x"), file("a.txt", strings.Repeat("a", 2000)))
	tests := map[string][]byte{
		"not gzip":       []byte("this is not a gzip stream"),
		"truncated":      good[:len(good)/2],
		"bad checksum":   append(bytes.Clone(good[:len(good)-8]), 0, 0, 0, 0, 0, 0, 0, 0),
		"gzip, not tar":  gzipOf(t, []byte(strings.Repeat("not a tar header ", 64))),
		"empty response": {},
	}
	for name, a := range tests {
		t.Run(name, func(t *testing.T) {
			ps := newPluginServer(t)
			ps.set("p", a)
			plugins := t.TempDir()
			if _, err := ps.client(t, "").InstallPlugin(context.Background(), "p", molecule.PluginOptions{Dir: plugins}); err == nil {
				t.Fatal("no error")
			}
			if names := dirNames(t, plugins); len(names) != 0 {
				t.Errorf("plugins dir holds %v", names)
			}
		})
	}
}

func TestInstallPluginCanceled(t *testing.T) {
	ps := newPluginServer(t)
	ps.set("p", tgz(t, file("a", "b")))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	plugins := t.TempDir()
	_, err := ps.client(t, "").InstallPlugin(ctx, "p", molecule.PluginOptions{Dir: plugins})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if errors.Is(err, molecule.ErrPlatformUnavailable) {
		t.Fatal("a caller's cancellation blamed on the platform")
	}
	if names := dirNames(t, plugins); len(names) != 0 {
		t.Errorf("plugins dir holds %v", names)
	}
}

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	if _, err := gz.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func doubleClient(t *testing.T, srv *moleculetest.Server, ws moleculetest.Workspace) *molecule.Client {
	t.Helper()
	c, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: ws.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestInstallPluginFromDouble installs a plugin served by the platform
// double and checks the Python SDK hash of what landed on disk.
func TestInstallPluginFromDouble(t *testing.T) {
	srv := moleculetest.NewServer()
	t.Cleanup(srv.Close)
	ws := srv.CreateWorkspace("ext-A")
	srv.AddPlugin("echo-tools", map[string][]byte{
		"plugin.yaml":           []byte("name: echo-tools\n"),
		"rules.md":              []byte("- be kind\n"),
		"scripts/setup.sh":      []byte("#!/bin/sh\n"),
		"skills/echo/SKILL.md":  []byte("# Echo\n"),
		"skills/echo/data.json": []byte(`{"k":1}`),
	})
	c := doubleClient(t, srv, ws)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plugins := t.TempDir()

	got, err := c.InstallPlugin(ctx, "echo-tools", molecule.PluginOptions{Dir: plugins})
	if err != nil {
		t.Fatal(err)
	}
	if got.Files != 5 || got.Source != "local://echo-tools" || got.Path != filepath.Join(plugins, "echo-tools") {
		t.Errorf("InstalledPlugin = %+v", got)
	}
	b, err := os.ReadFile(filepath.Join(got.Path, "skills", "echo", "SKILL.md"))
	if err != nil || string(b) != "# Echo\n" {
		t.Errorf("SKILL.md = %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(got.Path, "scripts", "setup.sh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("setup.sh mode: %v %v", fi, err)
	}
	// Verified re-install with the hash the first install reported.
	if _, err := c.InstallPlugin(ctx, "echo-tools", molecule.PluginOptions{Dir: plugins, ExpectedSHA256: got.SHA256}); err != nil {
		t.Fatalf("verified re-install: %v", err)
	}

	// The double's errors come back classified.
	_, err = c.InstallPlugin(ctx, "missing", molecule.PluginOptions{Dir: plugins})
	if !errors.Is(err, molecule.ErrNotFound) {
		t.Errorf("missing plugin: err = %v, want ErrNotFound", err)
	}
	_, err = c.InstallPlugin(ctx, "echo-tools", molecule.PluginOptions{Dir: plugins, Source: "github://acme/echo-tools"})
	var ae *molecule.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown source scheme: err = %v, want a 400 APIError", err)
	}
	other := srv.CreateWorkspace("ext-B")
	bad, err := molecule.New(molecule.Config{PlatformURL: srv.URL(), WorkspaceID: ws.ID, Token: other.Token, MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.InstallPlugin(ctx, "echo-tools", molecule.PluginOptions{Dir: plugins}); !errors.Is(err, molecule.ErrUnauthorized) {
		t.Errorf("another workspace's token: err = %v, want ErrUnauthorized", err)
	}
}
