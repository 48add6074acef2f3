package config

import (
	"encoding"
	"errors"
	"flag"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
	"github.com/molecule-ai/molecule-relay/internal/broker"
)

// Flags binds one command-line flag per environment variable of Config to
// fs. A flag overrides its variable only when it is given, so an
// environment variable is never shadowed by a flag default.
type Flags struct {
	set       map[string]string // env name → flag value given
	fieldEnv  map[string]string // Go field name → env name
	flagOfEnv map[string]string
}

// FlagName is the flag that mirrors an environment variable:
// MOLECULE_POLL_INTERVAL → poll-interval, NATS_URL → nats-url.
func FlagName(envName string) string {
	n := strings.TrimPrefix(envName, "MOLECULE_")
	return strings.ReplaceAll(strings.ToLower(n), "_", "-")
}

// BindFlags adds Config's flags to fs.
func BindFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{set: map[string]string{}, fieldEnv: map[string]string{}, flagOfEnv: map[string]string{}}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for i := range t.NumField() {
			sf := t.Field(i)
			if sf.Type.Kind() == reflect.Struct && sf.Tag.Get("env") == "" {
				walk(sf.Type)
				continue
			}
			name, _, _ := strings.Cut(sf.Tag.Get("env"), ",")
			if name == "" {
				continue
			}
			f.fieldEnv[sf.Name] = name
			fl := FlagName(name)
			f.flagOfEnv[name] = fl
			usage := "sets " + name
			if def := sf.Tag.Get("envDefault"); def != "" {
				usage += " (default " + def + ")"
			} else if def, ok := codeDefault(sf.Name); ok {
				usage += " (default " + def + ")"
			}
			fs.Var(&flagValue{f: f, env: name, isBool: sf.Type.Kind() == reflect.Bool}, fl, usage)
		}
	}
	walk(reflect.TypeOf(Config{}))
	return f
}

type flagValue struct {
	f      *Flags
	env    string
	isBool bool
}

func (v *flagValue) String() string {
	if v == nil || v.f == nil {
		return ""
	}
	return v.f.set[v.env]
}
func (v *flagValue) Set(s string) error { v.f.set[v.env] = s; return nil }
func (v *flagValue) IsBoolFlag() bool   { return v.isBool }

// Load reads Config from environ (os.Environ() form) overlaid with the flags
// given on the command line. It does not validate: call Validate with what
// the command needs. Errors match ErrInvalid and name the variable.
func Load(flags *Flags, environ []string) (*Config, error) {
	m := env.ToMap(environ)
	if flags != nil {
		for k, v := range flags.set {
			m[k] = v
		}
	}
	if err := applyWorkspacesFile(m); err != nil {
		return nil, err
	}
	if err := applyChannelSettings(m); err != nil {
		return nil, err
	}
	cfg := codeDefaults()
	if err := env.ParseWithOptions(&cfg, env.Options{Environment: m}); err != nil {
		return nil, flags.describe(err, m)
	}
	cfg.placeStore(m)
	cfg.NATS.SetDefaults()
	// From the process's environment only: a flag is not a variable.
	cfg.HandlerEnviron = handlerEnviron(cfg.HandlerEnv, environ)
	return &cfg, nil
}

// describe rewrites env's errors so they name the variable, not the Go field.
func (f *Flags) describe(err error, values map[string]string) error {
	if f == nil { // Load without flags (the Lambda functions): the names still
		f = BindFlags(flag.NewFlagSet("config", flag.ContinueOnError))
	}
	var agg env.AggregateError
	if !errors.As(err, &agg) {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	var msgs []string
	for _, e := range agg.Errors {
		var pe env.ParseError
		if errors.As(e, &pe) {
			if name, ok := f.fieldEnv[pe.Name]; ok {
				msgs = append(msgs, fmt.Sprintf("%s (--%s): %v", name, f.flagOfEnv[name], inOurWords(pe.Type, values[name], pe.Err)))
				continue
			}
		}
		msgs = append(msgs, e.Error())
	}
	sort.Strings(msgs)
	return fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
}

// codeDefaults is the Config that Load starts from: the defaults that are
// another package's constant rather than an envDefault tag, so the number
// is written once (an environment variable or flag overrides them).
func codeDefaults() Config {
	return Config{Concurrency: DefaultConcurrency, ReplyConcurrency: DefaultConcurrency}
}

// codeDefault is the codeDefaults value of the top-level field name, for
// the flag's usage text.
func codeDefault(name string) (string, bool) {
	v := reflect.ValueOf(codeDefaults()).FieldByName(name)
	if !v.IsValid() || v.IsZero() {
		return "", false
	}
	return fmt.Sprint(v.Interface()), true
}

// inOurWords says what is wrong with value and what is accepted, in place
// of the parser's own words ("strconv.ParseBool: parsing "yes": invalid
// syntax").
func inOurWords(t reflect.Type, value string, err error) error {
	if t == nil || reflect.PointerTo(t).Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return err // a type with its own parser (Seconds) says it best
	}
	switch {
	case t == reflect.TypeOf(time.Duration(0)):
		return fmt.Errorf("%q is not a duration; use a number and a unit, like 500ms, 5s or 1m", value)
	case t.Kind() == reflect.Bool:
		return fmt.Errorf("%q is not a boolean; use true or false", value)
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		return fmt.Errorf("%q is not a whole number", value)
	}
	return err
}

// placeStore sets the embedded server's store when NATS_STORE_DIR does
// not: the per-user one of these workspaces (broker.StoreLocation), so a
// relay finds its store from any working directory (issue 37).
func (c *Config) placeStore(m map[string]string) {
	if c.NATS.StoreDir != "" {
		c.NATS.StoreFrom = broker.StoreFromSetting
		return
	}
	ws := c.Workspaces()
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.ID
	}
	platform := c.PlatformURL
	if len(ws) > 0 && ws[0].PlatformURL != "" {
		platform = ws[0].PlatformURL
	}
	c.NATS.StoreDir, c.NATS.StoreFrom = broker.StoreLocation(func(k string) string { return m[k] }, platform, ids)
}
