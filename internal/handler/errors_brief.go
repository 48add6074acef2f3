package handler

import (
	"errors"
	"fmt"
	"net/http"
)

// Brief is err's text for logs above debug level: without what the
// handler's server answered (a *StatusError's Message) or its program wrote
// to stderr (an *ExitError's Stderr), which may quote the user's message (a
// FastAPI 422 echoes the request). Other errors are returned whole: a Go
// handler's errors are its author's to word.
func Brief(err error) string {
	var se *StatusError
	if errors.As(err, &se) {
		return fmt.Sprintf("handler: POST %s: %d %s (the answer's body is logged at debug level)", se.URL, se.Code, http.StatusText(se.Code))
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		c := *ee
		c.Stderr = ""
		return c.Error() + " (the tail of its stderr is on the exec line before)"
	}
	return err.Error()
}
