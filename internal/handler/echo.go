package handler

import (
	"context"
	"fmt"
)

// Echo replies "echo: <text>". It is the "echo" spec, for demos and tests.
var Echo Handler = Func(func(_ context.Context, req *Request) (string, error) {
	if req == nil || req.Message == nil {
		return "", fmt.Errorf("%w: request without a message", ErrPermanent)
	}
	return "echo: " + req.Message.Text, nil
})
