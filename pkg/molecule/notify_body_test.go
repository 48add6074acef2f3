package molecule

import (
	"encoding/json"
	"testing"
)

// notifyBody encodes to the bytes of the map Notify used to send.
func TestNotifyBodyEncodesLikeTheMap(t *testing.T) {
	files := []Attachment{{URI: "workspace:/a", Name: "a <b>", MimeType: "text/plain", Size: 3}}
	for _, tc := range []struct {
		text  string
		files []Attachment
	}{{"hi", nil}, {"say \"hi\" <b>\u2028 é", nil}, {"t", files}, {"t", []Attachment{}}} {
		old := map[string]any{"message": tc.text}
		if len(tc.files) > 0 {
			old["attachments"] = tc.files
		}
		want, _ := json.Marshal(old)
		got, err := json.Marshal(&notifyBody{Attachments: tc.files, Message: tc.text})
		if err != nil || string(got) != string(want) {
			t.Errorf("notifyBody = %s, %v; the map = %s", got, err, want)
		}
	}
}
