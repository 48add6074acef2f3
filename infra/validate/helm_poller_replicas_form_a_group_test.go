package validate

import (
	"bytes"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// renderedPoller renders the chart with set and returns its poller
// Deployment, its MOLECULE_POLLER_GROUP ("" when unset) and whether a
// PodDisruptionBudget covers it; every object follows the rules of Check.
func renderedPoller(t *testing.T, h string, set ...string) (d *appsv1.Deployment, group string, pdb bool) {
	t.Helper()
	out, err := render(t, h, set...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := Decode("helm template "+strings.Join(set, " "), bytes.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	checkAll(t, objs)
	for _, o := range objs {
		switch v := o.Value.(type) {
		case *appsv1.Deployment:
			if strings.HasSuffix(v.Name, "-poller") {
				d = v
			}
		case *policyv1.PodDisruptionBudget:
			pdb = pdb || v.Spec.Selector.MatchLabels["app.kubernetes.io/component"] == "poller"
		}
	}
	if d == nil {
		t.Fatalf("%v: no poller Deployment rendered", set)
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "MOLECULE_POLLER_GROUP" {
			group = e.Value
		}
	}
	return d, group, pdb
}

// Long-running poller replicas divide the workspaces only as a poller
// group: several replicas always get MOLECULE_POLLER_GROUP (named after
// the namespace and release unless poller.group names it), roll instead of
// Recreate, and get a PodDisruptionBudget; one replica stays as it was.
func TestHelmPollerReplicasFormAGroup(t *testing.T) {
	h := helm(t)
	for _, tc := range []struct {
		name      string
		set       []string
		replicas  int32
		group     string
		strategy  appsv1.DeploymentStrategyType
		pollerPDB bool
	}{
		{"one replica", []string{"poller.mode=deployment"}, 1, "", appsv1.RecreateDeploymentStrategyType, false},
		{"three replicas", []string{"poller.mode=deployment", "poller.replicas=3"}, 3, "molecule-relay-rel", appsv1.RollingUpdateDeploymentStrategyType, true},
		{"three replicas, a named group", []string{"poller.mode=deployment", "poller.replicas=3", "poller.group=fleet"}, 3, "fleet", appsv1.RollingUpdateDeploymentStrategyType, true},
		{"one replica joining a named group", []string{"poller.mode=deployment", "poller.group=fleet"}, 1, "fleet", appsv1.RollingUpdateDeploymentStrategyType, false},
		{"three replicas, no PDBs", []string{"poller.mode=deployment", "poller.replicas=3", "podDisruptionBudget.enabled=false"}, 3, "molecule-relay-rel", appsv1.RollingUpdateDeploymentStrategyType, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, group, pdb := renderedPoller(t, h, tc.set...)
			if d.Spec.Replicas == nil || *d.Spec.Replicas != tc.replicas {
				t.Errorf("replicas %v, want %d", d.Spec.Replicas, tc.replicas)
			}
			if group != tc.group {
				t.Errorf("MOLECULE_POLLER_GROUP %q, want %q", group, tc.group)
			}
			if d.Spec.Strategy.Type != tc.strategy {
				t.Errorf("strategy %s, want %s", d.Spec.Strategy.Type, tc.strategy)
			}
			if pdb != tc.pollerPDB {
				t.Errorf("poller PodDisruptionBudget rendered: %v, want %v", pdb, tc.pollerPDB)
			}
		})
	}
}

// A --once run polls every workspace, so the chart refuses several
// CronJob pollers or a group for them; and a group name the relay would
// refuse.
func TestHelmPollerGroupRefusals(t *testing.T) {
	h := helm(t)
	for _, tc := range []struct {
		set  []string
		want string
	}{
		{[]string{"poller.replicas=3"}, "poller.replicas=3 with poller.mode=cronjob"},
		{[]string{"poller.group=fleet"}, "poller.group with poller.mode=cronjob"},
		{[]string{"poller.mode=deployment", "poller.group=a.b"}, "/poller/group"},
		{[]string{"poller.mode=deployment", "poller.replicas=0"}, "/poller/replicas"},
	} {
		if _, err := render(t, h, tc.set...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v rendered (err %v), want a refusal naming %q", tc.set, err, tc.want)
		}
	}
}
