package validate

import (
	"strings"
	"testing"
)

// A misspelt value fails the render at every level of the values, the
// stage blocks included, naming the key: before, values.schema.json built
// the stage blocks from allOf, which draft-07's additionalProperties does
// not see through, so dispatcher.agentAPI=false rendered with rc 0 and
// left the workspace tokens with the dispatcher.
func TestHelmSchemaRefusesUnknownKeys(t *testing.T) {
	h := helm(t)
	for _, set := range []string{
		"dispatcher.agentAPI=false",
		"keda.enabeld=true",
		"poller.mod=deployment",
		"replier.replica=3",
		"keda.dispatcher.maxReplicas=9",
		"image.tags=v1",
		"secret.keys.natsPassword.poler=x",
		"metrics.serviceMonitor.intervall=10s",
	} {
		key, _, _ := strings.Cut(set, "=")
		leaf := key[strings.LastIndex(key, ".")+1:]
		if _, err := render(t, h, set); err == nil || !strings.Contains(err.Error(), leaf) {
			t.Errorf("--set %s rendered (err %v); want a schema error naming %q", set, err, leaf)
		}
	}
	// The keys the chart documents still render.
	for _, set := range []string{"dispatcher.agentApi=false", "keda.enabled=true", "poller.mode=deployment", "keda.dispatcher.maxReplicaCount=9", "keda.replier.lagThreshold=40", "replier.replicas=3"} {
		if _, err := render(t, h, set); err != nil {
			t.Errorf("--set %s: %v", set, err)
		}
	}
}
