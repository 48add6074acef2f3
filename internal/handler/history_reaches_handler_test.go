package handler_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
)

func historyRequest(text string) *handler.Request {
	req := newRequest(text)
	req.Conversation = "peer-e1f2a3b4-c5d6-4e7f-8a9b-0c1d2e3f4a5b"
	req.History = []handler.Turn{
		{Role: handler.RoleUser, Text: "my name is Ada", ActivityID: "a1"},
		{Role: handler.RoleAgent, Text: "hello Ada", ActivityID: "a1"},
		{Role: handler.RoleUser, ActivityID: "a2"}, // attachments only: no chat message
	}
	return req
}

func TestExecPayloadCarriesConversationAndHistory(t *testing.T) {
	in := filepath.Join(t.TempDir(), "stdin.json")
	h := mustParse(t, "exec:"+script(t, `cat > "$OUT"; echo ok`), handler.Options{Env: []string{"OUT=" + in}})
	req := historyRequest("what is my name?")
	if _, err := h.Handle(testCtx(t), req); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	b, err := os.ReadFile(in)
	if err != nil {
		t.Fatal(err)
	}
	var got handler.Payload
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("stdin: %v\n%s", err, b)
	}
	if got.Conversation != req.Conversation || !reflect.DeepEqual(got.History, req.History) {
		t.Fatalf("payload conversation %q history %+v\nwant %q %+v", got.Conversation, got.History, req.Conversation, req.History)
	}
}

func TestOpenAISendsHistoryAsChatMessages(t *testing.T) {
	got := make(chan chatReq, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var cr chatReq
		_ = json.Unmarshal(b, &cr)
		got <- cr
		fmt.Fprint(w, `{"choices":[{"message":{"role":"assistant","content":"Ada"}}]}`)
	})
	h := mustParse(t, "openai:"+s.URL, handler.Options{OpenAISystemPrompt: "Be brief."})
	if reply, err := h.Handle(testCtx(t), historyRequest("what is my name?")); err != nil || reply != "Ada" {
		t.Fatalf("Handle = %q, %v", reply, err)
	}
	cr := <-got
	var roles, texts []string
	for _, m := range cr.Messages {
		roles, texts = append(roles, m.Role), append(texts, m.Content)
	}
	wantRoles := []string{"system", "user", "assistant", "user"}
	wantTexts := []string{"Be brief.", "my name is Ada", "hello Ada", "what is my name?"}
	if !reflect.DeepEqual(roles, wantRoles) || !reflect.DeepEqual(texts, wantTexts) {
		t.Fatalf("messages %v %q, want %v %q", roles, texts, wantRoles, wantTexts)
	}
}
