package mcpchannel_test

import (
	"strings"
	"testing"
	"time"

	"github.com/molecule-ai/molecule-relay/internal/mcpchannel"
	"github.com/molecule-ai/molecule-relay/internal/testkit/pipelinetest"
	"github.com/molecule-ai/molecule-relay/pkg/molecule/moleculetest"
)

// On a platform without a memory plugin (503 "memory plugin is not
// configured", enteros-core aeec8e47 handlers/memories.go:221-226,
// 350-355), recall_memory answers at once from the relay's conversation
// memory, saying so, and commit_memory fails at once, saying nothing was
// saved. Before, recall_memory retried the 503 for about 7 s and failed.
func TestMemoryToolsWithoutPluginAnswerAtOnce(t *testing.T) {
	t.Parallel()
	w := pipelinetest.New(t, pipelinetest.Options{Platform: []moleculetest.Option{moleculetest.WithoutMemoryPlugin()}})
	r := startRelay(t, w)
	cl := connect(t, r)
	w.SendCanvas("the deploy key rotates on Mondays")
	n := cl.next(20 * time.Second)
	if _, isErr := cl.call(mcpchannel.ToolReply, map[string]any{"activity_id": n.Meta["activity_id"], "text": "noted"}); isErr {
		t.Fatal("reply failed")
	}

	start := time.Now()
	text, isErr := cl.call(mcpchannel.ToolRecallMemory, map[string]any{"query": "deploy"})
	took := time.Since(start)
	t.Logf("recall_memory answered in %s: %s", took, text)
	if isErr || !strings.Contains(text, `"source": "conversation"`) || !strings.Contains(text, "MEMORY_PLUGIN_URL") {
		t.Fatalf("recall_memory: %q (error %v)", text, isErr)
	}
	if took > time.Second {
		t.Errorf("recall_memory took %s, want under 1s (no retry of a 503 that will not change)", took)
	}
	pipelinetest.Eventually(t, 10*time.Second, "the canvas turn recalled", func() bool {
		text, isErr := cl.call(mcpchannel.ToolRecallMemory, map[string]any{"query": "deploy"})
		return !isErr && strings.Contains(text, "rotates on Mondays") && !strings.Contains(text, `"noted"`)
	})

	start = time.Now()
	text, isErr = cl.call(mcpchannel.ToolCommitMemory, map[string]any{"content": "a fact"})
	took = time.Since(start)
	t.Logf("commit_memory answered in %s: %s", took, text)
	if !isErr || !strings.Contains(text, "nothing was saved") || took > time.Second {
		t.Fatalf("commit_memory: %q (error %v) after %s", text, isErr, took)
	}
}
