package handler_test

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		spec   string
		ok     bool
		String string // fmt.Sprint of the handler, when ok and not echo
	}{
		{"echo", true, ""},
		{"  echo  ", true, ""},
		{"exec:true", true, ""},
		{"exec: true --flag 'a b'", true, ""},
		{"http:http://127.0.0.1:9/hook", true, "http:http://127.0.0.1:9/hook"},
		{"http:https://u:p@agent.example/hook?key=k", true, "http:https://agent.example/hook"},
		{"openai:http://127.0.0.1:11434", true, "openai:http://127.0.0.1:11434/v1/chat/completions"},
		{"openai:https://api.openai.com/v1", true, "openai:https://api.openai.com/v1/chat/completions"},
		{"", false, ""},
		{"echo:", false, ""},
		{"Echo", false, ""},
		{"bogus", false, ""},
		{"https://agent.example/hook", false, ""},
		{"exec:", false, ""},
		{"exec:   ", false, ""},
		{"exec:'unterminated", false, ""},
		{"exec:trailing\\", false, ""},
		{"http:", false, ""},
		{"http:ftp://x/y", false, ""},
		{"http:/relative", false, ""},
		{"openai:", false, ""},
		{"openai:localhost:11434", false, ""},
	} {
		t.Run(tt.spec, func(t *testing.T) {
			h, err := handler.Parse(tt.spec, handler.Options{})
			if !tt.ok {
				if !errors.Is(err, handler.ErrInvalidSpec) {
					t.Fatalf("Parse = %v, %v; want ErrInvalidSpec", h, err)
				}
				return
			}
			if err != nil || h == nil {
				t.Fatalf("Parse: %v", err)
			}
			if tt.String != "" && fmt.Sprint(h) != tt.String {
				t.Fatalf("handler prints as %q, want %q", fmt.Sprint(h), tt.String)
			}
		})
	}
	_, err := handler.Parse("bogus", handler.Options{})
	if !strings.Contains(err.Error(), handler.SpecForms) {
		t.Fatalf("unknown spec error does not list the valid forms: %v", err)
	}
	_, err = handler.Parse("nats://u:secret@h", handler.Options{})
	if strings.Contains(err.Error(), "secret") {
		t.Fatalf("unknown spec error echoes credentials: %v", err)
	}
}

func TestParseRejectsInvalidOptions(t *testing.T) {
	for _, opts := range []handler.Options{
		{Timeout: -time.Second},
		{MaxOutputBytes: -1},
		{ProgressInterval: -time.Second},
		{Env: []string{"NOEQUALS"}},
		{Env: []string{"=value"}},
	} {
		if _, err := handler.Parse("echo", opts); !errors.Is(err, handler.ErrInvalidOptions) {
			t.Errorf("Parse with %+v = %v, want ErrInvalidOptions", opts, err)
		}
	}
}

func TestOptionsDefaults(t *testing.T) {
	var o handler.Options
	o.SetDefaults()
	if o.Timeout != 5*time.Minute || o.MaxOutputBytes != 1<<20 || o.ProgressInterval != 5*time.Second ||
		o.OpenAIModel != handler.DefaultOpenAIModel || o.HTTPClient == nil {
		t.Fatalf("defaults: %+v", o)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	set := handler.Options{Timeout: time.Second, OpenAIModel: "m", MaxOutputBytes: 7, ProgressInterval: time.Millisecond}
	kept := set
	set.SetDefaults()
	set.HTTPClient = nil
	if !reflect.DeepEqual(set, kept) {
		t.Fatalf("SetDefaults overwrote set fields: %+v", set)
	}
}

func TestOptionsLogValueHidesSecrets(t *testing.T) {
	var b strings.Builder
	log := slog.New(slog.NewTextHandler(&b, nil))
	log.Info("handler", "options", handler.Options{OpenAIAPIKey: "sk-hidden", Env: []string{"DB_PASSWORD=pw-hidden"}, OpenAISystemPrompt: "prompt-hidden"})
	out := b.String()
	if strings.Contains(out, "hidden") || !strings.Contains(out, "DB_PASSWORD") || !strings.Contains(out, "openai_api_key=true") {
		t.Fatalf("log line: %s", out)
	}
}

func TestSplitArgs(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []string
		bad  bool
	}{
		{"", nil, false},
		{"   ", nil, false},
		{"a", []string{"a"}, false},
		{"  a   b\tc\n", []string{"a", "b", "c"}, false},
		{`'a b' c`, []string{"a b", "c"}, false},
		{`"a b" c`, []string{"a b", "c"}, false},
		{`a'b'"c"d`, []string{"abcd"}, false},
		{`''`, []string{""}, false},
		{`"" x`, []string{"", "x"}, false},
		{`'it''s'`, []string{"its"}, false},
		{`"say \"hi\""`, []string{`say "hi"`}, false},
		{`"back\\slash" "\n stays"`, []string{`back\slash`, `\n stays`}, false},
		{`'no \escape'`, []string{`no \escape`}, false},
		{`a\ b \'c`, []string{"a b", "'c"}, false},
		{`$HOME ~ * $(rm -rf /)`, []string{"$HOME", "~", "*", "$(rm", "-rf", "/)"}, false},
		{`'open`, nil, true},
		{`"open`, nil, true},
		{`end\`, nil, true},
	} {
		got, err := handler.SplitArgs(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("SplitArgs(%q) = %q, want an error", tt.in, got)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitArgs(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestEcho(t *testing.T) {
	reply, err := handler.Echo.Handle(testCtx(t), newRequest("ping"))
	if err != nil || reply != "echo: ping" {
		t.Fatalf("Echo = %q, %v", reply, err)
	}
}
