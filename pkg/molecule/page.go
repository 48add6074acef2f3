package molecule

import (
	"encoding/json"
	"fmt"
	"time"
)

// readPage reads an activity body into its rows, in the platform's
// order. A row keeps only id, method, seq and created_at read: it is
// split into its members only when ActivityRow.Parse asks.
func readPage(r request, body []byte) ([]ActivityRow, error) {
	var raws []json.RawMessage
	if err := decodeJSON(r, body, &raws); err != nil {
		return nil, err
	}
	if raws == nil {
		// null decodes into a nil slice without error.
		return nil, fmt.Errorf("%w: %s %s: response body is not a JSON array", ErrPlatformUnavailable, r.method, r.path)
	}
	rows := make([]ActivityRow, len(raws))
	for i, raw := range raws {
		rows[i] = ActivityRow{JSON: raw, valid: true}
		if jsonKind(raw) != '{' {
			continue
		}
		o := splitObject(raw)
		rows[i].ID, rows[i].Method = stringMember(o, "id"), stringMember(o, "method")
		rows[i].Seq = seqValue(o["seq"])
		if s := stringMember(o, "created_at"); s != "" {
			rows[i].CreatedAt, _ = time.Parse(time.RFC3339Nano, s) // zero when it does not parse
		}
	}
	return rows, nil
}

// stringMember is o[key] if it is a string, else "".
func stringMember(o rawObject, key string) string {
	if v, ok := o[key]; ok && jsonKind(v) == '"' {
		return unquote(v)
	}
	return ""
}
