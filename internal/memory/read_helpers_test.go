package memory_test

import (
	"context"
	"testing"

	"github.com/molecule-ai/molecule-relay/internal/handler"
	"github.com/molecule-ai/molecule-relay/internal/memory"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
)

// canvasOf returns load, which fails t unless reader's Load of the
// "canvas" conversation gives want (as texts), and record, which records
// a user turn there through writer.
func canvasOf(t *testing.T, ctx context.Context, reader, writer *memory.Store) (load func(want ...string), record func(id, text string)) {
	load = func(want ...string) {
		t.Helper()
		got, err := reader.Load(ctx, ws, "canvas")
		if err != nil || !equal(texts(got), want) {
			t.Fatalf("Load = %q, %v; want %q", texts(got), err, want)
		}
	}
	record = func(id, text string) {
		t.Helper()
		if _, err := writer.Record(ctx, ws, "canvas", turn(id, handler.RoleUser, text)); err != nil {
			t.Fatal(err)
		}
	}
	return load, record
}

// answers is how many messages p's connection received while read ran:
// what a Store of p asked the server for.
func answers(p *pipelinetest.Proc, read func()) uint64 {
	before := p.NC.Stats().InMsgs
	read()
	return p.NC.Stats().InMsgs - before
}
