package validate

import (
	"fmt"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// Check applies the relay's deployment rules to a set of decoded objects
// and returns every violation:
//   - every image is pinned: a tag other than "latest", or a digest;
//   - a Deployment's containers have liveness on /livez (touches nothing)
//     and readiness on /healthz (NATS connected);
//   - a ScaledObject scales a Deployment of the same set;
//   - a PodDisruptionBudget and a Service select the pods of a Deployment
//     of the same set, and a ServiceMonitor selects a Service of it;
//   - a pod runs under a ServiceAccount of the set (when the set has one)
//     and does not mount its API token (the relay never calls Kubernetes).
func Check(objs []Object) []error {
	var errs []error
	deployments := map[string]bool{}
	var podLabels []map[string]string // of the Deployments
	var serviceLabels []map[string]string
	accounts := map[string]bool{}
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			deployments[v.Name] = true
			podLabels = append(podLabels, v.Spec.Template.Labels)
		case *corev1.Service:
			serviceLabels = append(serviceLabels, v.Labels)
		case *corev1.ServiceAccount:
			accounts[v.Name] = true
		}
	}
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			errs = append(errs, checkPod(o, v.Spec.Template.Spec, true)...)
			errs = append(errs, checkAccount(o, v.Spec.Template.Spec, accounts)...)
		case *batchv1.CronJob:
			errs = append(errs, checkPod(o, v.Spec.JobTemplate.Spec.Template.Spec, false)...)
			errs = append(errs, checkAccount(o, v.Spec.JobTemplate.Spec.Template.Spec, accounts)...)
		case *policyv1.PodDisruptionBudget:
			if v.Spec.Selector == nil || !selectsAny(v.Spec.Selector.MatchLabels, podLabels) {
				errs = append(errs, fmt.Errorf("%s %s: its selector matches the pods of no Deployment of this set", o.Kind, o.Name))
			}
		case *corev1.Service:
			if !selectsAny(v.Spec.Selector, podLabels) {
				errs = append(errs, fmt.Errorf("%s %s: its selector matches the pods of no Deployment of this set", o.Kind, o.Name))
			}
		case *monitoringv1.ServiceMonitor:
			if !selectsAny(v.Spec.Selector.MatchLabels, serviceLabels) {
				errs = append(errs, fmt.Errorf("%s %s: its selector matches no Service of this set", o.Kind, o.Name))
			}
		case *kedav1alpha1.ScaledObject:
			if t := v.Spec.ScaleTargetRef; t == nil || !deployments[t.Name] {
				errs = append(errs, fmt.Errorf("%s %s: scaleTargetRef %v names no Deployment of this set", o.Kind, o.Name, t))
			}
		}
	}
	return errs
}

func checkPod(o Object, spec corev1.PodSpec, serving bool) []error {
	var errs []error
	for _, c := range spec.Containers {
		if err := pinned(c.Image); err != nil {
			errs = append(errs, fmt.Errorf("%s %s container %s: %w", o.Kind, o.Name, c.Name, err))
		}
		if !serving {
			continue
		}
		if p := probePath(c.LivenessProbe); p != "/livez" {
			errs = append(errs, fmt.Errorf("%s %s container %s: liveness probe %q, want /livez (touches nothing; /metrics calls JetStream)", o.Kind, o.Name, c.Name, p))
		}
		if p := probePath(c.ReadinessProbe); p != "/healthz" {
			errs = append(errs, fmt.Errorf("%s %s container %s: readiness probe %q, want /healthz", o.Kind, o.Name, c.Name, p))
		}
	}
	return errs
}

func probePath(p *corev1.Probe) string {
	if p == nil || p.HTTPGet == nil {
		return ""
	}
	return p.HTTPGet.Path
}

// pinned accepts repository:tag (tag not "latest") and repository@digest.
func pinned(image string) error {
	if strings.Contains(image, "@sha256:") {
		return nil
	}
	name := image[strings.LastIndex(image, "/")+1:]
	i := strings.LastIndex(name, ":")
	if i < 0 || name[i+1:] == "" {
		return fmt.Errorf("image %q has no tag (that is :latest)", image)
	}
	if name[i+1:] == "latest" {
		return fmt.Errorf("image %q: pin a release tag or digest, not :latest", image)
	}
	return nil
}

// selectsAny says whether a non-empty selector matches one of the label
// sets.
func selectsAny(sel map[string]string, sets []map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for _, labels := range sets {
		match := true
		for k, v := range sel {
			if labels[k] != v {
				match = false
				break
			}
		}
		if match {
			return true
		}
	}
	return false
}

// checkAccount: a pod of a set that has ServiceAccounts runs under one of
// them, and never mounts its token.
func checkAccount(o Object, spec corev1.PodSpec, accounts map[string]bool) []error {
	if len(accounts) == 0 {
		return nil
	}
	var errs []error
	if !accounts[spec.ServiceAccountName] {
		errs = append(errs, fmt.Errorf("%s %s: serviceAccountName %q is no ServiceAccount of this set", o.Kind, o.Name, spec.ServiceAccountName))
	}
	if spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		errs = append(errs, fmt.Errorf("%s %s: mounts the ServiceAccount token; the relay never calls the Kubernetes API (automountServiceAccountToken: false)", o.Kind, o.Name))
	}
	return errs
}
