package check

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "../helm/sluice"
	manifests = "../k8s/sluice.yaml"
)

var update = flag.Bool("update", false, "rewrite deploy/k8s/sluice.yaml from the chart")

// TestChartLints is `helm lint`: no error and no warning.
func TestChartLints(t *testing.T) {
	res := action.NewLint().Run([]string{chartDir}, nil)
	for _, err := range res.Errors {
		t.Errorf("lint: %v", err)
	}
	for _, m := range res.Messages {
		t.Logf("lint: %s", m)
	}
	if action.HasWarningsOrErrors(res) {
		t.Error("helm lint reports warnings or errors")
	}
}

// render is `helm template sluice deploy/helm/sluice --namespace sluice`
// with vals over the chart's values.
func render(t *testing.T, vals map[string]any) string {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(action.NewConfiguration())
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName = "sluice"
	install.Namespace = "sluice"
	install.Replace = true
	rel, err := install.Run(chrt, vals)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	r, ok := rel.(*release.Release)
	if !ok {
		t.Fatalf("helm template gave a %T", rel)
	}
	return strings.TrimSpace(r.Manifest) + "\n"
}

// objects are the rendered manifests, each decoded strictly into its
// Kubernetes type: a field Kubernetes does not know fails the test.
type objects struct {
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
}

func decode(t *testing.T, manifest string) objects {
	t.Helper()
	o := objects{map[string]*appsv1.Deployment{}, map[string]*appsv1.StatefulSet{}, map[string]*corev1.Service{}}
	for doc := range strings.SplitSeq(manifest, "\n---\n") {
		doc = strings.TrimPrefix(strings.TrimSpace(doc), "---\n")
		if doc == "" {
			continue
		}
		if onlyComments(doc) {
			continue
		}
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		var into any
		switch meta.Kind {
		case "Deployment":
			d := &appsv1.Deployment{}
			o.deployments[meta.Metadata.Name], into = d, d
		case "StatefulSet":
			s := &appsv1.StatefulSet{}
			o.statefulSets[meta.Metadata.Name], into = s, s
		case "Service":
			s := &corev1.Service{}
			o.services[meta.Metadata.Name], into = s, s
		default:
			t.Fatalf("the chart renders a %s (%s) this test does not check", meta.Kind, meta.Metadata.Name)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), into); err != nil {
			t.Errorf("%s %s: %v", meta.Kind, meta.Metadata.Name, err)
		}
	}
	return o
}

// TestChartRenders checks what the chart renders with its defaults: the
// portal's ports, probes, user and secrets, Postgres, and Redis with its
// append-only file.
func TestChartRenders(t *testing.T) {
	o := decode(t, render(t, nil))

	portal := o.deployments["sluice-portal"]
	if portal == nil {
		t.Fatalf("no Deployment sluice-portal: %v", keys(o.deployments))
	}
	pod := portal.Spec.Template.Spec
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.FSGroup == nil || *sc.FSGroup != 65532 {
		t.Errorf("portal pod security context %+v: want non-root 65532 with fsGroup 65532 (the image's user)", sc)
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("portal has %d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["http"] != 8080 || ports["grpc"] != 8081 {
		t.Errorf("portal ports %v, want http 8080 and grpc 8081", ports)
	}
	probe := func(name string, p *corev1.Probe, path string) {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe %+v, want GET %s on port http", name, p, path)
		}
	}
	probe("readiness", c.ReadinessProbe, "/readyz")
	probe("liveness", c.LivenessProbe, "/healthz")
	env := envOf(c)
	want := map[string]string{
		"PORTAL_ADDR": ":8080", "PORTAL_GRPC_ADDR": ":8081", "PORTAL_INSTANCES": fmt.Sprint(*portal.Spec.Replicas),
		"PORTAL_REDIS_FAILURE_MODE": "local", "REDIS_URL": "redis://sluice-redis:6379/0",
		"DATABASE_URL": "postgres://sluice:$(POSTGRES_PASSWORD)@sluice-postgres:5432/sluice?sslmode=disable",
	}
	for name, value := range want {
		if e, ok := env[name]; !ok || e.Value != value {
			t.Errorf("portal env %s = %+v, want %q", name, e, value)
		}
	}
	secretRefs(t, "portal", c, map[string]string{"PORTAL_SESSION_SECRET": "session-secret", "POSTGRES_PASSWORD": "postgres-password",
		"PORTAL_GRPC_TOKEN":     "grpc-token",
		"PORTAL_ADMIN_PASSWORD": "admin-password", "PORTAL_ADMIN_TOKEN": "admin-token"})
	if slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "POSTGRES_PASSWORD" }) > slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "DATABASE_URL" }) {
		t.Error("POSTGRES_PASSWORD must come before DATABASE_URL for Kubernetes to expand it")
	}

	svc := o.services["sluice-portal"]
	if svc == nil {
		t.Fatalf("no Service sluice-portal: %v", keys(o.services))
	}
	svcPorts := map[string]int32{}
	for _, p := range svc.Spec.Ports {
		svcPorts[p.Name] = p.Port
	}
	if svcPorts["http"] != 8080 || svcPorts["grpc"] != 8081 {
		t.Errorf("portal Service ports %v, want http 8080 and grpc 8081", svcPorts)
	}

	redis := o.statefulSets["sluice-redis"]
	if redis == nil {
		t.Fatalf("no StatefulSet sluice-redis: %v", keys(o.statefulSets))
	}
	args := strings.Join(redis.Spec.Template.Spec.Containers[0].Args, " ")
	if !strings.Contains(args, "--appendonly yes") || !strings.Contains(args, "--appendfsync everysec") {
		t.Errorf("redis args %q: want an append-only file fsynced every second", args)
	}
	if len(redis.Spec.VolumeClaimTemplates) != 1 {
		t.Error("redis keeps its append-only file on no volume")
	}
	pg := o.statefulSets["sluice-postgres"]
	if pg == nil {
		t.Fatalf("no StatefulSet sluice-postgres: %v", keys(o.statefulSets))
	}
	secretRefs(t, "postgres", pg.Spec.Template.Spec.Containers[0], map[string]string{"POSTGRES_PASSWORD": "postgres-password"})
	for _, name := range []string{"sluice-postgres", "sluice-redis"} {
		if o.services[name] == nil {
			t.Errorf("no Service %s", name)
		}
	}
}

// TestChartWithExternalStores renders the chart for a Postgres and a Redis
// the operator runs: both URLs come from the Secret, and neither is
// deployed.
func TestChartWithExternalStores(t *testing.T) {
	o := decode(t, render(t, map[string]any{
		"postgres": map[string]any{"enabled": false},
		"redis":    map[string]any{"enabled": false},
		"portal":   map[string]any{"grpcPort": 0},
	}))
	if len(o.statefulSets) != 0 {
		t.Errorf("external stores, yet the chart deploys %v", keys(o.statefulSets))
	}
	c := o.deployments["sluice-portal"].Spec.Template.Spec.Containers[0]
	secretRefs(t, "portal", c, map[string]string{"DATABASE_URL": "database-url", "REDIS_URL": "redis-url", "PORTAL_SESSION_SECRET": "session-secret"})
	if _, ok := envOf(c)["PORTAL_GRPC_TOKEN"]; ok {
		t.Error("grpcPort 0 still asks the Secret for grpc-token")
	}
	if _, ok := envOf(c)["PORTAL_GRPC_ADDR"]; ok || len(c.Ports) != 1 {
		t.Errorf("grpcPort 0 still serves gRPC: ports %v", c.Ports)
	}
}

// TestK8sManifestsAreTheChart keeps deploy/k8s/sluice.yaml, for operators
// without Helm, equal to the chart rendered with its defaults; -update
// rewrites it.
func TestK8sManifestsAreTheChart(t *testing.T) {
	got := render(t, nil)
	header := "# Sluice on Kubernetes without Helm: deploy/helm/sluice rendered with its\n" +
		"# defaults (release sluice). Create the Secret first (docs/deploy.md), then\n" +
		"#   kubectl create namespace sluice && kubectl -n sluice apply -f deploy/k8s/sluice.yaml\n" +
		"# Generated by: cd deploy/check && go test -run TestK8sManifestsAreTheChart -update\n"
	want := header + got
	if *update {
		if err := os.MkdirAll(filepath.Dir(manifests), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(manifests, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(manifests)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, []byte(want)) {
		t.Errorf("%s differs from the chart's rendering: run go test -run TestK8sManifestsAreTheChart -update in deploy/check", manifests)
	}
	decode(t, string(b))
}

// TestNoLiteralSecrets fails if any rendered environment variable that
// names a secret carries a value instead of a Secret reference.
func TestNoLiteralSecrets(t *testing.T) {
	o := decode(t, render(t, nil))
	var containers []corev1.Container
	for _, d := range o.deployments {
		containers = append(containers, d.Spec.Template.Spec.Containers...)
	}
	for _, s := range o.statefulSets {
		containers = append(containers, s.Spec.Template.Spec.Containers...)
	}
	for _, c := range containers {
		for _, e := range c.Env {
			upper := strings.ToUpper(e.Name)
			if (strings.Contains(upper, "SECRET") || strings.Contains(upper, "PASSWORD") || strings.Contains(upper, "TOKEN")) && e.ValueFrom == nil {
				t.Errorf("%s: %s is a literal value, not a Secret reference", c.Name, e.Name)
			}
		}
	}
}

// onlyComments reports whether a YAML document holds nothing but comments.
func onlyComments(doc string) bool {
	for line := range strings.Lines(doc) {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// secretRefs checks that each variable of want comes from the chart's
// Secret under the key want names.
func secretRefs(t *testing.T, what string, c corev1.Container, want map[string]string) {
	t.Helper()
	env := envOf(c)
	for name, key := range want {
		e, ok := env[name]
		if !ok || e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil ||
			e.ValueFrom.SecretKeyRef.Name != "sluice" || e.ValueFrom.SecretKeyRef.Key != key {
			t.Errorf("%s env %s = %+v, want the Secret sluice's key %s", what, name, e, key)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
