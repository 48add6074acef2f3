package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// axeVersion is the axe-core release the accessibility check runs
// (.ci/run installs the same).
const axeVersion = "4.14.1"

// chromium returns the headless Chromium to drive, or skips the test
// loudly; with MOLECULE_REQUIRE_BROWSER=1 (CI) a missing one fails it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p != "" {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	missing(t, "Chromium (apt-get install -y chromium)")
	return ""
}

func missing(t *testing.T, what string) {
	t.Helper()
	msg := "!!! THE CONSOLE'S BROWSER TEST DID NOT RUN: " + what + " is missing. Set MOLECULE_REQUIRE_BROWSER=1 to make this a failure (.ci/run does)."
	if os.Getenv("MOLECULE_REQUIRE_BROWSER") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// axeSource returns axe.min.js: from MOLECULE_AXE_JS, else from the
// user's cache, installed there from npm when missing. The console never
// serves it: the test injects it into the page.
func axeSource(t *testing.T) string {
	t.Helper()
	path := os.Getenv("MOLECULE_AXE_JS")
	if path == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			missing(t, "a cache directory for axe-core")
		}
		dir := filepath.Join(cache, "molecule-relay", "axe")
		path = filepath.Join(dir, "node_modules", "axe-core", "axe.min.js")
		if _, err := os.Stat(path); err != nil {
			if out, err := exec.Command("npm", "install", "--no-audit", "--no-fund", "--prefix", dir, "axe-core@"+axeVersion).CombinedOutput(); err != nil {
				missing(t, fmt.Sprintf("axe-core (npm install axe-core@%s failed: %v: %s)", axeVersion, err, out))
			}
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		missing(t, "axe-core's axe.min.js ("+err.Error()+")")
	}
	return string(b)
}

// browser starts a headless Chromium; its context ends with the test.
func browser(t *testing.T, exe string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start Chromium %s: %v", exe, err)
	}
	return ctx
}

// run runs steps with a deadline, failing the test with what.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs a with a deadline and returns its value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// press focuses sel and presses key: how the test drives every action,
// as a keyboard user would.
func press(sel, key string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(chromedp.Focus(chromedp.CSS(sel)), chromedp.KeyEvent(key))
}

// view opens a view from the navigation with the keyboard.
func view(name string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(press(`nav a[data-view="`+name+`"]`, kb.Enter), chromedp.WaitVisible(chromedp.CSS("#view-"+name)))
}

// poll waits until expr (a JavaScript expression) is truthy and returns
// its value.
func poll[T any](expr string) chromedp.Action[T] {
	return chromedp.Poll[T](expr, chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(15*time.Second))
}

// waitJS waits until expr is truthy.
func waitJS(expr string) chromedp.Action[chromedp.Void] {
	p := poll[bool]("!!(" + expr + ")")
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := p(ctx, t)
		return chromedp.Void{}, err
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	return value(t, ctx, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any `json:"target"`
	} `json:"nodes"`
}

// checkAccessibility runs axe-core on the page as it is and fails the
// test on a serious or critical violation; it returns the count of each
// impact.
func checkAccessibility(t *testing.T, ctx context.Context, axe, where string) map[string]int {
	t.Helper()
	value(t, ctx, "inject axe-core", chromedp.Evaluate[*runtime.RemoteObject](axe))
	s := value(t, ctx, "axe on "+where, chromedp.Evaluate[string](`axe.run(document, {resultTypes: ["violations"]}).then(r => JSON.stringify(r.violations))`, chromedp.EvalAwaitPromise))
	var vs []axeViolation
	if err := json.Unmarshal([]byte(s), &vs); err != nil {
		t.Fatalf("axe violations: %v", err)
	}
	counts := map[string]int{}
	for _, v := range vs {
		counts[v.Impact]++
		if v.Impact == "serious" || v.Impact == "critical" {
			t.Errorf("accessibility (%s): %s %s: %s at %v", where, v.Impact, v.ID, v.Help, v.Nodes)
		} else {
			t.Logf("accessibility (%s): %s %s: %s", where, v.Impact, v.ID, v.Help)
		}
	}
	return counts
}

// screenshot saves the page as docs/console/<name>.png when
// MOLECULE_CONSOLE_SCREENSHOTS is set (1: the repository's docs/console;
// else a directory).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("MOLECULE_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	if dir == "1" {
		dir = filepath.Join("..", "..", "docs", "console")
	}
	png := value(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

func contains(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}
