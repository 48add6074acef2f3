package samtemplate_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/testkit/samtemplate"
)

// functions maps each function's logical id to its directory under
// functions/.
var functions = map[string]string{
	"PollerFunction":     "poller",
	"DispatcherFunction": "dispatcher",
	"ReplierFunction":    "replier",
}

// lambdaSizeLimit is the budget for one bootstrap (10 MB).
const lambdaSizeLimit = 10 << 20

type template struct {
	root string
	doc  map[string]any
}

func loadTemplate(t *testing.T) template {
	t.Helper()
	root, err := samtemplate.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	docs, err := samtemplate.Load(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatalf("parse template.yaml: %v", err)
	}
	if len(docs) != 1 {
		t.Fatalf("template.yaml has %d documents, want 1", len(docs))
	}
	doc, ok := docs[0].(map[string]any)
	if !ok {
		t.Fatalf("template.yaml is not a mapping")
	}
	return template{root: root, doc: doc}
}

func (tp template) get(t *testing.T, keys ...string) any {
	t.Helper()
	v, ok := samtemplate.Path(tp.doc, keys...)
	if !ok {
		t.Fatalf("template.yaml has no %s", strings.Join(keys, "."))
	}
	return v
}

func (tp template) resources(t *testing.T, typ string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for id, r := range tp.get(t, "Resources").(map[string]any) {
		m := r.(map[string]any)
		if m["Type"] == typ {
			out[id] = m
		}
	}
	return out
}

func ref(name string) map[string]any { return map[string]any{"Ref": name} }

func equal(a, b any) bool {
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for k, v := range av {
			if !equal(v, bv[k]) {
				return false
			}
		}
		return true
	case []any:
		bv, ok := b.([]any)
		if !ok || len(av) != len(bv) {
			return false
		}
		for i := range av {
			if !equal(av[i], bv[i]) {
				return false
			}
		}
		return true
	default:
		return a == b
	}
}

func TestTemplateGlobals(t *testing.T) {
	tp := loadTemplate(t)
	if got := tp.get(t, "Transform"); got != "AWS::Serverless-2016-10-31" {
		t.Errorf("Transform = %v", got)
	}
	tests := []struct {
		path []string
		want any
	}{
		{[]string{"Globals", "Function", "Runtime"}, "provided.al2023"},
		{[]string{"Globals", "Function", "Handler"}, "bootstrap"},
		{[]string{"Globals", "Function", "Architectures"}, []any{ref("Architecture")}},
		{[]string{"Parameters", "Architecture", "Default"}, "arm64"},
		{[]string{"Parameters", "Architecture", "AllowedValues"}, []any{"arm64", "x86_64"}},
		{[]string{"Globals", "Function", "LoggingConfig", "LogFormat"}, "JSON"},
		// Secrets are read through the Parameters and Secrets extension.
		{[]string{"Globals", "Function", "Layers"}, []any{ref("SecretsExtensionLayerArn")}},
		{[]string{"Globals", "Function", "Environment", "Variables", "NATS_URL"}, ref("NatsUrl")},
		{[]string{"Globals", "Function", "Environment", "Variables", "NATS_CREDS_SECRET"}, ref("NatsCredsSecretArn")},
		{[]string{"Globals", "Function", "Environment", "Variables", "MOLECULE_PLATFORM_URL"}, ref("PlatformUrl")},
		{[]string{"Globals", "Function", "Environment", "Variables", "MOLECULE_WORKSPACE_IDS"}, ref("WorkspaceIds")},
		{[]string{"Globals", "Function", "Environment", "Variables", "MOLECULE_PLATFORM_URLS"}, ref("PlatformUrls")},
		{[]string{"Globals", "Function", "Environment", "Variables", "MOLECULE_ORG_IDS"}, ref("OrgIds")},
		{[]string{"Parameters", "PlatformUrls", "Default"}, ""},
		{[]string{"Parameters", "OrgIds", "Default"}, ""},
	}
	for _, tc := range tests {
		if got := tp.get(t, tc.path...); !equal(got, tc.want) {
			t.Errorf("%s = %#v, want %#v", strings.Join(tc.path, "."), got, tc.want)
		}
	}
	for _, k := range []string{"Timeout", "MemorySize"} {
		if _, ok := samtemplate.Path(tp.doc, "Globals", "Function", k); !ok {
			t.Errorf("Globals.Function.%s not set", k)
		}
	}
	// VPC only when subnets are given.
	vpc := tp.get(t, "Globals", "Function", "VpcConfig")
	if cond, _ := samtemplate.Path(vpc, "Fn::If", "0"); cond != "HasVpc" {
		t.Errorf("VpcConfig is not conditional on HasVpc: %#v", vpc)
	}
}

func TestTemplateFunctions(t *testing.T) {
	tp := loadTemplate(t)
	fns := tp.resources(t, "AWS::Serverless::Function")
	var ids []string
	for id := range fns {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	if want := []string{"DispatcherFunction", "PollerFunction", "ReplierFunction"}; !slices.Equal(ids, want) {
		t.Fatalf("functions %v, want %v", ids, want)
	}
	logGroups := tp.resources(t, "AWS::Logs::LogGroup")
	roles := tp.resources(t, "AWS::IAM::Role")
	outputs := tp.get(t, "Outputs").(map[string]any)

	for id, fn := range fns {
		t.Run(id, func(t *testing.T) {
			props := fn["Properties"].(map[string]any)
			if bm, _ := samtemplate.Path(fn, "Metadata", "BuildMethod"); bm != "makefile" {
				t.Errorf("Metadata.BuildMethod = %v, want makefile", bm)
			}
			if props["CodeUri"] != "." {
				t.Errorf("CodeUri = %v, want . (the Makefile and go.mod are at the root)", props["CodeUri"])
			}
			// Every scheduled event is an EventBridge Scheduler schedule
			// without retries, and so is the async invoke behind it.
			events, _ := props["Events"].(map[string]any)
			if len(events) == 0 {
				t.Errorf("no events")
			}
			for name, e := range events {
				if typ, _ := samtemplate.Path(e, "Type"); typ != "ScheduleV2" {
					t.Errorf("event %s type %v, want ScheduleV2", name, typ)
				}
				if n, _ := samtemplate.Path(e, "Properties", "RetryPolicy", "MaximumRetryAttempts"); n != 0 {
					t.Errorf("event %s MaximumRetryAttempts = %v, want 0", name, n)
				}
			}
			if n, _ := samtemplate.Path(props, "EventInvokeConfig", "MaximumRetryAttempts"); n != 0 {
				t.Errorf("EventInvokeConfig.MaximumRetryAttempts = %v, want 0", n)
			}
			// Own log group with retention.
			lg, _ := samtemplate.Path(props, "LoggingConfig", "LogGroup", "Ref")
			lgr, ok := logGroups[lg.(string)]
			if !ok {
				t.Fatalf("LoggingConfig.LogGroup %v is not a log group of the template", lg)
			}
			if r, _ := samtemplate.Path(lgr, "Properties", "RetentionInDays"); !equal(r, ref("LogRetentionDays")) {
				t.Errorf("log group %v retention %v", lg, r)
			}
			// Own role, no wildcard resources.
			roleID, _ := samtemplate.Path(props, "Role", "Fn::GetAtt", "0")
			role, ok := roles[roleID.(string)]
			if !ok {
				t.Fatalf("Role %v is not a role of the template", roleID)
			}
			checkNoWildcard(t, roleID.(string), role)
			if _, ok := outputs[id+"Arn"]; !ok {
				t.Errorf("no output %sArn", id)
			}
		})
	}

	poller := fns["PollerFunction"]["Properties"].(map[string]any)
	if poller["ReservedConcurrentExecutions"] != 1 {
		t.Errorf("poller ReservedConcurrentExecutions = %v, want 1", poller["ReservedConcurrentExecutions"])
	}
	if v, _ := samtemplate.Path(fns["DispatcherFunction"], "Properties", "Environment", "Variables", "MOLECULE_HANDLER"); !equal(v, ref("Handler")) {
		t.Errorf("dispatcher MOLECULE_HANDLER = %#v", v)
	}
	// A drain must have room for one handler run (and the replier for one
	// notify): the stage cores start no work that cannot finish before the
	// deadline less their start margin (2 s) and the drain margin (3 s).
	params := tp.get(t, "Parameters").(map[string]any)
	drainMin, _ := samtemplate.Path(params, "DrainTimeout", "MinValue")
	handlerDefault, _ := samtemplate.Path(params, "HandlerTimeout", "Default")
	if dm, hd := drainMin.(int), handlerDefault.(int); hd+5 >= dm || 30+5 >= dm {
		t.Errorf("DrainTimeout MinValue %d leaves no room for HandlerTimeout %d (or the 30 s notify) + 5 s margins", dm, hd)
	}
	if v, _ := samtemplate.Path(fns["DispatcherFunction"], "Properties", "Environment", "Variables", "MOLECULE_HANDLER_TIMEOUT"); !equal(v, ref("HandlerTimeout")) {
		t.Errorf("dispatcher MOLECULE_HANDLER_TIMEOUT = %#v", v)
	}
	// Least privilege: only the functions that talk to the platform can
	// read the workspace tokens: the poller, the replier, and the
	// dispatcher for its agent API, under DispatcherAgentApiOn alone.
	for id, wantTokens := range map[string]bool{"PollerFunction": true, "DispatcherFunction": true, "ReplierFunction": true} {
		props := fns[id]["Properties"].(map[string]any)
		_, hasEnv := samtemplate.Path(props, "Environment", "Variables", "MOLECULE_WORKSPACE_TOKENS_SECRET")
		roleID, _ := samtemplate.Path(props, "Role", "Fn::GetAtt", "0")
		canRead := samtemplate.References(roles[roleID.(string)])["WorkspaceTokensSecretArn"]
		if hasEnv != wantTokens || canRead != wantTokens {
			t.Errorf("%s: tokens env %v, role reads tokens %v; want %v", id, hasEnv, canRead, wantTokens)
		}
		if !samtemplate.References(roles[roleID.(string)])["NatsCredsSecretArn"] {
			t.Errorf("%s: role cannot read the NATS credentials", id)
		}
	}
	dprops := fns["DispatcherFunction"]["Properties"].(map[string]any)
	env, _ := samtemplate.Path(dprops, "Environment", "Variables", "MOLECULE_WORKSPACE_TOKENS_SECRET")
	apiOff, _ := samtemplate.Path(dprops, "Environment", "Variables", "MOLECULE_AGENT_API_LISTEN")
	droles, _ := samtemplate.Path(dprops, "Role", "Fn::GetAtt", "0")
	if !samtemplate.References(env)["DispatcherAgentApiOn"] || !samtemplate.References(apiOff)["DispatcherAgentApiOn"] {
		t.Errorf("dispatcher tokens %#v, MOLECULE_AGENT_API_LISTEN %#v: want both under DispatcherAgentApiOn", env, apiOff)
	}
	var tokenGrant any
	var walk func(any)
	walk = func(v any) {
		switch c := v.(type) {
		case map[string]any:
			if iff, ok := c["Fn::If"].([]any); ok && len(iff) == 3 && iff[0] == "DispatcherAgentApiOn" {
				tokenGrant = iff[1]
			}
			for _, e := range c {
				walk(e)
			}
		case []any:
			for _, e := range c {
				walk(e)
			}
		}
	}
	walk(roles[droles.(string)])
	if !samtemplate.References(tokenGrant)["WorkspaceTokensSecretArn"] {
		t.Errorf("the dispatcher role's token grant is not conditional on DispatcherAgentApiOn: %#v", tokenGrant)
	}
}

// checkNoWildcard fails on any IAM statement whose Resource is "*".
func checkNoWildcard(t *testing.T, id string, role map[string]any) {
	t.Helper()
	var walk func(any)
	walk = func(v any) {
		switch c := v.(type) {
		case map[string]any:
			if r, ok := c["Resource"]; ok {
				if r == "*" || (func() bool { l, ok := r.([]any); return ok && slices.Contains(l, any("*")) })() {
					t.Errorf("role %s grants %v on every resource", id, c["Action"])
				}
			}
			for _, e := range c {
				walk(e)
			}
		case []any:
			for _, e := range c {
				walk(e)
			}
		}
	}
	walk(role["Properties"])
}

func TestTemplateEveryParameterUsed(t *testing.T) {
	tp := loadTemplate(t)
	body := map[string]any{}
	for _, k := range []string{"Conditions", "Globals", "Resources", "Outputs"} {
		body[k] = tp.doc[k]
	}
	refs := samtemplate.References(body)
	for name := range tp.get(t, "Parameters").(map[string]any) {
		if !refs[name] {
			t.Errorf("parameter %s is never used", name)
		}
	}
	for name := range tp.get(t, "Conditions").(map[string]any) {
		if !refs[name] {
			t.Errorf("condition %s is never used", name)
		}
	}
	// And nothing refers to a name that does not exist.
	known := map[string]bool{}
	for _, k := range []string{"Parameters", "Conditions", "Resources"} {
		for name := range tp.get(t, k).(map[string]any) {
			known[name] = true
		}
	}
	for name := range refs {
		if !known[name] && !strings.HasPrefix(name, "AWS::") {
			t.Errorf("reference to unknown %s", name)
		}
	}
}

// TestFunctionsBuild checks, for every function of the template, that
// Makefile.deploy has the build-<LogicalId> target sam build calls and that
// it builds functions/<name>; then builds the three bootstraps as Lambda
// gets them and checks the size budget and that the embedded NATS server
// stayed out.
func TestFunctionsBuild(t *testing.T) {
	tp := loadTemplate(t)
	mk, err := os.ReadFile(filepath.Join(tp.root, "Makefile.deploy"))
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for id, dir := range functions {
		target := regexp.MustCompile(`(?m)^build-` + id + `:.*\n((?:\t.*\n)+)`).FindSubmatch(mk)
		if target == nil {
			t.Errorf("Makefile.deploy has no build-%s target", id)
			continue
		}
		// sam_artifact builds functions/<dir> for both architectures into
		// $(ARTIFACTS_DIR) next to the bootstrap script that picks one
		// (internal/testkit/lambdaemu's sam_artifact_test runs the result).
		if !strings.Contains(string(target[1]), "$(call sam_artifact,"+dir+")") {
			t.Errorf("build-%s does not build functions/%s with sam_artifact into $(ARTIFACTS_DIR):\n%s", id, dir, target[1])
		}
		if _, err := os.Stat(filepath.Join(tp.root, "functions", dir, "main.go")); err != nil {
			t.Logf("functions/%s/main.go not there yet: not built", dir)
			continue
		}
		pkgs = append(pkgs, "./functions/"+dir)
	}
	if len(pkgs) == 0 {
		t.Skip("no functions/<stage>/main.go yet: the build, size and dependency checks need them")
	}
	slices.Sort(pkgs)
	env := append(os.Environ(), "GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0")

	list := exec.Command("go", append([]string{"list", "-tags", "lambda.norpc", "-deps", "-f", "{{.ImportPath}}"}, pkgs...)...)
	list.Dir, list.Env = tp.root, env
	out, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "github.com/nats-io/nats-server/") {
			t.Errorf("a Lambda function depends on %s: the embedded server must stay out of the bootstraps", p)
		}
	}

	outDir := t.TempDir()
	for _, p := range pkgs {
		bin := filepath.Join(outDir, filepath.Base(p))
		build := exec.Command("go", "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", bin, p)
		build.Dir, build.Env = tp.root, env
		if out, err := build.CombinedOutput(); err != nil {
			t.Errorf("build %s: %v\n%s", p, err, out)
			continue
		}
		fi, err := os.Stat(bin)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s bootstrap (linux/arm64): %d bytes (%.1f MiB)", p, fi.Size(), float64(fi.Size())/(1<<20))
		if fi.Size() > lambdaSizeLimit {
			t.Errorf("%s bootstrap is %d bytes, over the %d-byte budget", p, fi.Size(), lambdaSizeLimit)
		}
	}
}

// TestTemplateEventDriven checks the event-driven shape (issue 10): the
// poller's window fills its schedule's period, the functions name the ones
// they wake, the dispatcher's fan-out bound is its reserved concurrency,
// the other schedules are a slow safety net, and lambda:InvokeFunction is
// granted on exactly the dispatcher and the replier.
func TestTemplateEventDriven(t *testing.T) {
	tp := loadTemplate(t)
	fns := tp.resources(t, "AWS::Serverless::Function")
	props := func(id string) map[string]any { return fns[id]["Properties"].(map[string]any) }
	envOf := func(id, k string) any {
		v, _ := samtemplate.Path(props(id), "Environment", "Variables", k)
		return v
	}
	params := tp.get(t, "Parameters").(map[string]any)
	if d, _ := samtemplate.Path(params, "PollerSchedule", "Default"); d != "rate(1 minute)" || props("PollerFunction")["Timeout"] != 60 {
		t.Errorf("poller schedule %v, timeout %v: want rate(1 minute) and 60 s, one window per period", d, props("PollerFunction")["Timeout"])
	}
	if v := envOf("PollerFunction", "MOLECULE_SSE"); v != nil {
		t.Errorf("poller MOLECULE_SSE = %v; the window needs its SSE wake-ups", v)
	}
	for _, name := range []string{"DispatcherSchedule", "ReplierSchedule"} {
		if d, _ := samtemplate.Path(params, name, "Default"); d != "rate(5 minutes)" {
			t.Errorf("%s default %v, want the rate(5 minutes) safety net", name, d)
		}
	}
	if v := envOf("PollerFunction", "MOLECULE_DISPATCHER_FUNCTION"); !equal(v, ref("DispatcherFunction")) {
		t.Errorf("poller MOLECULE_DISPATCHER_FUNCTION = %#v", v)
	}
	if v := envOf("DispatcherFunction", "MOLECULE_REPLIER_FUNCTION"); !equal(v, ref("ReplierFunction")) {
		t.Errorf("dispatcher MOLECULE_REPLIER_FUNCTION = %#v", v)
	}
	if v := envOf("DispatcherFunction", "MOLECULE_DISPATCHER_FANOUT"); !equal(v, ref("DispatcherConcurrency")) ||
		!equal(props("DispatcherFunction")["ReservedConcurrentExecutions"], ref("DispatcherConcurrency")) {
		t.Errorf("dispatcher fan-out %#v, reserved concurrency %#v; want both DispatcherConcurrency", v, props("DispatcherFunction")["ReservedConcurrentExecutions"])
	}

	// Every lambda:InvokeFunction grant, by the role that holds it.
	grants := map[string][]string{}
	add := func(role string, doc any) {
		stmts, _ := samtemplate.Path(doc, "Statement")
		for _, st := range stmts.([]any) {
			m := st.(map[string]any)
			if m["Action"] != "lambda:InvokeFunction" {
				continue
			}
			rs, ok := m["Resource"].([]any)
			if !ok {
				rs = []any{m["Resource"]}
			}
			for _, r := range rs {
				fn, _ := samtemplate.Path(r, "Fn::GetAtt", "0")
				attr, _ := samtemplate.Path(r, "Fn::GetAtt", "1")
				if attr != "Arn" {
					t.Errorf("role %s: lambda:InvokeFunction on %#v, want a function's Arn", role, r)
				}
				grants[role] = append(grants[role], fmt.Sprint(fn))
			}
		}
	}
	for id, role := range tp.resources(t, "AWS::IAM::Role") {
		pols, _ := samtemplate.Path(role, "Properties", "Policies")
		for _, p := range pols.([]any) {
			add(id, p.(map[string]any)["PolicyDocument"])
		}
	}
	for id, pol := range tp.resources(t, "AWS::IAM::Policy") {
		checkNoWildcard(t, id, pol)
		roles, _ := samtemplate.Path(pol, "Properties", "Roles")
		for _, r := range roles.([]any) {
			add(r.(map[string]any)["Ref"].(string), pol["Properties"].(map[string]any)["PolicyDocument"])
		}
	}
	for role := range grants {
		slices.Sort(grants[role])
	}
	want := map[string][]string{
		"PollerRole":     {"DispatcherFunction"},
		"DispatcherRole": {"DispatcherFunction", "ReplierFunction"}, // the replier, and its own fan-out
	}
	if len(grants) != len(want) || !slices.Equal(grants["PollerRole"], want["PollerRole"]) || !slices.Equal(grants["DispatcherRole"], want["DispatcherRole"]) {
		t.Errorf("lambda:InvokeFunction grants %v, want %v", grants, want)
	}
}
