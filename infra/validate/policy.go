package validate

import (
	"fmt"
	"strings"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// Check applies the relay's deployment rules to a set of decoded objects
// and returns every violation:
//   - every image is pinned: a tag other than "latest", or a digest;
//   - a Deployment's containers have liveness on /livez (touches nothing)
//     and readiness on /healthz (NATS connected);
//   - a ScaledObject scales a Deployment of the same set.
func Check(objs []Object) []error {
	var errs []error
	deployments := map[string]bool{}
	for _, o := range objs {
		if d, ok := o.Value.(*appsv1.Deployment); ok {
			deployments[d.Name] = true
		}
	}
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			errs = append(errs, checkPod(o, v.Spec.Template.Spec, true)...)
		case *batchv1.CronJob:
			errs = append(errs, checkPod(o, v.Spec.JobTemplate.Spec.Template.Spec, false)...)
		case *kedav1alpha1.ScaledObject:
			if t := v.Spec.ScaleTargetRef; t == nil || !deployments[t.Name] {
				errs = append(errs, fmt.Errorf("ScaledObject %s: scaleTargetRef %v names no Deployment of this set", o.Name, t))
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
