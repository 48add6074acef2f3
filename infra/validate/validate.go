// Package validate checks the relay's Kubernetes manifests (infra/k8s and
// the Helm chart's rendered output) without a cluster or network: every
// document is decoded strictly into its k8s.io/api type, or KEDA's own Go
// type for a ScaledObject, so a misspelt or misplaced field is an error.
//
// It is its own Go module so that k8s.io/api and KEDA stay out of the
// relay's module graph.
package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Object is one decoded manifest.
type Object struct {
	Kind, Name string
	// Value is a *appsv1.Deployment, *batchv1.CronJob, *corev1.Service,
	// *corev1.ConfigMap, *corev1.ServiceAccount,
	// *policyv1.PodDisruptionBudget, *kedav1alpha1.ScaledObject or
	// *monitoringv1.ServiceMonitor.
	Value any
}

// kinds maps apiVersion/kind to a new value of its Go type. Anything else
// is refused: a manifest of a kind this list lacks is a manifest nobody
// checked.
var kinds = map[string]func() any{
	"apps/v1/Deployment":            func() any { return new(appsv1.Deployment) },
	"batch/v1/CronJob":              func() any { return new(batchv1.CronJob) },
	"v1/Service":                    func() any { return new(corev1.Service) },
	"v1/ConfigMap":                  func() any { return new(corev1.ConfigMap) },
	"v1/ServiceAccount":             func() any { return new(corev1.ServiceAccount) },
	"policy/v1/PodDisruptionBudget": func() any { return new(policyv1.PodDisruptionBudget) },
	"keda.sh/v1alpha1/ScaledObject": func() any { return new(kedav1alpha1.ScaledObject) },
	// The Prometheus Operator's type (github.com/prometheus-operator/
	// prometheus-operator/pkg/apis/monitoring, v0.93: the last on the
	// k8s.io/api minor this module uses).
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return new(monitoringv1.ServiceMonitor) },
}

// Decode splits a multi-document YAML stream and decodes every non-empty
// document strictly (unknown or duplicate fields are errors). where names
// the source in errors.
func Decode(where string, r io.Reader) ([]Object, error) {
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var out []Object
	for i := 0; ; i++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", where, i, err)
		}
		if isEmpty(doc) {
			continue
		}
		o, err := decodeOne(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", where, i, err)
		}
		out = append(out, o)
	}
}

func decodeOne(doc []byte) (Object, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return Object{}, err
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return Object{}, errors.New("no apiVersion or kind: not a Kubernetes manifest")
	}
	mk, ok := kinds[tm.APIVersion+"/"+tm.Kind]
	if !ok {
		return Object{}, fmt.Errorf("%s %s: a kind this check does not know; add its Go type to validate.kinds", tm.APIVersion, tm.Kind)
	}
	v := mk()
	if err := yaml.UnmarshalStrict(doc, v); err != nil {
		return Object{}, fmt.Errorf("%s %q: %w", tm.Kind, tm.Metadata.Name, err)
	}
	return Object{Kind: tm.Kind, Name: tm.Metadata.Name, Value: v}, nil
}

// isEmpty reports whether doc holds only comments and blank lines.
func isEmpty(doc []byte) bool {
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if s := strings.TrimSpace(string(l)); s != "" && !strings.HasPrefix(s, "#") && s != "---" {
			return false
		}
	}
	return true
}
