package check

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// rendered is one kustomization's objects, decoded into the Kubernetes
// API types.
type rendered struct {
	path         string
	namespaces   []*corev1.Namespace
	services     []*corev1.Service
	secrets      []*corev1.Secret
	configMaps   []*corev1.ConfigMap
	statefulSets []*appsv1.StatefulSet
	deployments  []*appsv1.Deployment
	pdbs         []*policyv1.PodDisruptionBudget
	hpas         []*autoscalingv2.HorizontalPodAutoscaler
	certificates []*certificate
	issuers      []*issuer
}

// render builds the kustomization at dir (relative to deploy/) with the
// kustomize library `kubectl kustomize` embeds, and decodes every object
// strictly: an unknown field or an unknown kind fails the test.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	path := filepath.Join(repoRoot, "deploy", dir)
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	resMap, err := k.Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	r := &rendered{path: dir}
	for _, res := range resMap.Resources() {
		y, err := res.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("%s: %s %s", dir, res.GetKind(), res.GetName())
		strict := func(obj any) {
			if err := yaml.UnmarshalStrict(y, obj); err != nil {
				t.Errorf("%s does not decode strictly: %v", what, err)
			}
		}
		switch gvk := res.GetApiVersion() + " " + res.GetKind(); gvk {
		case "v1 Namespace":
			o := &corev1.Namespace{}
			strict(o)
			r.namespaces = append(r.namespaces, o)
		case "v1 Service":
			o := &corev1.Service{}
			strict(o)
			r.services = append(r.services, o)
		case "v1 Secret":
			o := &corev1.Secret{}
			strict(o)
			r.secrets = append(r.secrets, o)
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			strict(o)
			r.configMaps = append(r.configMaps, o)
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			strict(o)
			r.statefulSets = append(r.statefulSets, o)
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			strict(o)
			r.deployments = append(r.deployments, o)
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			strict(o)
			r.pdbs = append(r.pdbs, o)
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			strict(o)
			r.hpas = append(r.hpas, o)
		case "cert-manager.io/v1 Certificate":
			o := &certificate{}
			strict(o)
			r.certificates = append(r.certificates, o)
		case "cert-manager.io/v1 Issuer":
			o := &issuer{}
			strict(o)
			r.issuers = append(r.issuers, o)
		default:
			t.Errorf("%s: kind %s is not checked here; add it to render", what, gvk)
		}
	}
	return r
}

// workload is a StatefulSet or Deployment seen through its pod template.
type workload struct {
	kind, name string
	selector   map[string]string
	pod        *corev1.PodTemplateSpec
}

func (r *rendered) workloads() []workload {
	var out []workload
	for _, s := range r.statefulSets {
		out = append(out, workload{"StatefulSet", s.Name, s.Spec.Selector.MatchLabels, &s.Spec.Template})
	}
	for _, d := range r.deployments {
		out = append(out, workload{"Deployment", d.Name, d.Spec.Selector.MatchLabels, &d.Spec.Template})
	}
	return out
}

func (r *rendered) service(name string) *corev1.Service {
	for _, s := range r.services {
		if s.Name == name {
			return s
		}
	}
	return nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// checkWorkloads holds for every overlay: selectors match templates; every
// container has probes, resources and a non-root security context; every
// Strata container probes /readyz and /healthz on its admin port over
// HTTPS (the admin port speaks TLS; the kubelet asks without a client
// certificate, which the admin port does not need), passes only flags and
// STRATA_* variables its binary declares, and refers only to variables it
// defines; every Strata workload has a disruption budget and a Service
// with a "metrics" port. checkSecurity (k8s_security_test.go) holds the
// TLS and authentication settings.
func checkWorkloads(t *testing.T, r *rendered) {
	for _, w := range r.workloads() {
		what := fmt.Sprintf("%s: %s %s", r.path, w.kind, w.name)
		if len(w.selector) == 0 || !labels.SelectorFromSet(w.selector).Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s: selector %v does not match its pod labels %v", what, w.selector, w.pod.Labels)
		}
		spec := &w.pod.Spec
		podSC := spec.SecurityContext
		strataPod := false
		for _, c := range spec.Containers {
			cw := fmt.Sprintf("%s container %s", what, c.Name)
			if c.ReadinessProbe == nil || c.LivenessProbe == nil {
				t.Errorf("%s: needs a readiness and a liveness probe", cw)
			}
			req, lim := c.Resources.Requests, c.Resources.Limits
			if req.Cpu().IsZero() || req.Memory().IsZero() || lim.Memory().IsZero() {
				t.Errorf("%s: needs cpu and memory requests and a memory limit, has %v / %v", cw, req, lim)
			}
			checkNonRoot(t, cw, podSC, c.SecurityContext)

			bin, ok := binaryFor(c.Image)
			if !ok {
				continue
			}
			strataPod = true
			var env []string
			defined := map[string]bool{}
			for _, e := range c.Env {
				env = append(env, e.Name)
				defined[e.Name] = true
			}
			checkArgs(t, cw, bin, c.Args, env)
			if len(c.Command) > 0 {
				t.Errorf("%s: overrides the image's entrypoint with %q", cw, c.Command)
			}
			for _, a := range c.Args {
				for _, m := range varRef.FindAllStringSubmatch(a, -1) {
					if !defined[m[1]] {
						t.Errorf("%s: %s refers to $(%s), which the container does not define (Kubernetes would pass it literally)", cw, a, m[1])
					}
				}
			}
			admin := flagValue(c.Args, "admin-listen")
			_, adminPort, _ := strings.Cut(admin, ":")
			metrics := containerPort(c, "metrics")
			if admin == "" || strconv.Itoa(int(metrics)) != adminPort {
				t.Errorf("%s: --admin-listen %q and the port named metrics (%d) must agree", cw, admin, metrics)
			}
			for _, p := range []struct {
				probe *corev1.Probe
				path  string
			}{{c.ReadinessProbe, "/readyz"}, {c.LivenessProbe, "/healthz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port != intstr.FromString("metrics") ||
					p.probe.HTTPGet.Scheme != corev1.URISchemeHTTPS {
					t.Errorf("%s: probe should GET %s over HTTPS on the metrics (admin) port, is %+v", cw, p.path, p.probe)
				}
			}
		}
		if !strataPod {
			continue
		}
		if !slices.ContainsFunc(r.pdbs, func(p *policyv1.PodDisruptionBudget) bool {
			return p.Spec.Selector != nil && labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(labels.Set(w.pod.Labels))
		}) {
			t.Errorf("%s: no PodDisruptionBudget selects its pods", what)
		}
		if !slices.ContainsFunc(r.services, func(s *corev1.Service) bool {
			return len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.pod.Labels)) &&
				slices.ContainsFunc(s.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" })
		}) {
			t.Errorf("%s: no Service with a port named metrics (for a ServiceMonitor) selects its pods", what)
		}
	}
	// Every Service selects pods, and its named target ports exist there.
	for _, s := range r.services {
		var pods []*corev1.PodTemplateSpec
		for _, w := range r.workloads() {
			if labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.pod.Labels)) {
				pods = append(pods, w.pod)
			}
		}
		if sel := s.Spec.Selector; len(sel) > 0 && sel["statefulset.kubernetes.io/pod-name"] == "" && len(pods) == 0 {
			t.Errorf("%s: Service %s selects no workload's pods (%v)", r.path, s.Name, sel)
		}
		for _, p := range s.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				continue
			}
			for _, pod := range pods {
				if containerPortIn(pod, p.TargetPort.StrVal) == 0 {
					t.Errorf("%s: Service %s targets port %q, which pod %v does not name", r.path, s.Name, p.TargetPort.StrVal, pod.Labels)
				}
			}
		}
	}
}

// checkNonRoot requires a non-root user, no privilege escalation and no
// capabilities.
func checkNonRoot(t *testing.T, what string, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	t.Helper()
	nonRoot := (c != nil && c.RunAsNonRoot != nil && *c.RunAsNonRoot) || (pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot)
	uid := int64(-1)
	if pod != nil && pod.RunAsUser != nil {
		uid = *pod.RunAsUser
	}
	if c != nil && c.RunAsUser != nil {
		uid = *c.RunAsUser
	}
	if !nonRoot || uid == 0 {
		t.Errorf("%s: must run as non-root (runAsNonRoot true, uid not 0)", what)
	}
	if c == nil || c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation ||
		c.Capabilities == nil || !slices.Contains(c.Capabilities.Drop, "ALL") {
		t.Errorf("%s: needs allowPrivilegeEscalation false and capabilities drop ALL", what)
	}
}

func flagValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func containerPort(c corev1.Container, name string) int32 {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	return 0
}

func containerPortIn(pod *corev1.PodTemplateSpec, name string) int32 {
	for _, c := range pod.Spec.Containers {
		if p := containerPort(c, name); p != 0 {
			return p
		}
	}
	return 0
}

// TestKubernetesBase checks the base's own promises: controllers and
// storage nodes are StatefulSets with headless Services (published before
// ready, since members find each other while starting), per-pod volumes,
// anti-affinity and zone spread, the storage rack from the zone, and the
// gateway behind a LoadBalancer Service with an autoscaler.
func TestKubernetesBase(t *testing.T) {
	r := render(t, "k8s/base")
	checkWorkloads(t, r)
	checkSecurity(t, r)
	for _, name := range []string{"controller", "storage"} {
		var ss *appsv1.StatefulSet
		for _, s := range r.statefulSets {
			if s.Name == name {
				ss = s
			}
		}
		if ss == nil {
			t.Fatalf("no StatefulSet %s", name)
		}
		svc := r.service(ss.Spec.ServiceName)
		if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
			t.Errorf("StatefulSet %s: serviceName %q must be a headless Service publishing not-ready addresses", name, ss.Spec.ServiceName)
		}
		if len(ss.Spec.VolumeClaimTemplates) == 0 {
			t.Errorf("StatefulSet %s: no per-pod volume", name)
		}
		if ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
			t.Errorf("StatefulSet %s: pods must start in parallel (a quorum forms before readiness)", name)
		}
		spec := ss.Spec.Template.Spec
		if spec.Affinity == nil || spec.Affinity.PodAntiAffinity == nil {
			t.Errorf("StatefulSet %s: no pod anti-affinity", name)
		}
		if !slices.ContainsFunc(spec.TopologySpreadConstraints, func(c corev1.TopologySpreadConstraint) bool {
			return c.TopologyKey == "topology.kubernetes.io/zone"
		}) {
			t.Errorf("StatefulSet %s: not spread over zones", name)
		}
	}
	for _, s := range r.statefulSets {
		if s.Name != "storage" {
			continue
		}
		c := s.Spec.Template.Spec.Containers[0]
		if flagValue(c.Args, "rack") != "$(ZONE)" || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
			return e.Name == "ZONE" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil &&
				e.ValueFrom.FieldRef.FieldPath == "metadata.labels['topology.kubernetes.io/zone']"
		}) {
			t.Errorf("storage: --rack must come from the zone label, args %q", c.Args)
		}
	}
	if gw := r.service("gateway"); gw == nil || gw.Spec.Type != corev1.ServiceTypeLoadBalancer {
		t.Errorf("the gateway Service must be a LoadBalancer")
	}
	if !slices.ContainsFunc(r.hpas, func(h *autoscalingv2.HorizontalPodAutoscaler) bool {
		return h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == "gateway"
	}) {
		t.Errorf("no HorizontalPodAutoscaler scales the gateway Deployment")
	}
}

// TestKubernetesDevOverlay checks the dev overlay renders, decodes and
// keeps the workload invariants, that every Secret and ConfigMap a
// container reads is generated, and that each advertised external address
// is a port kind.yaml maps.
func TestKubernetesDevOverlay(t *testing.T) {
	r := render(t, "k8s/overlays/dev")
	checkWorkloads(t, r)
	checkSecurity(t, r)
	checkCertificates(t, r)
	has := func(kind, name string) bool {
		if kind == "Secret" {
			return slices.ContainsFunc(r.secrets, func(s *corev1.Secret) bool { return s.Name == name }) ||
				slices.ContainsFunc(r.certificates, func(c *certificate) bool { return c.Spec.SecretName == name })
		}
		return slices.ContainsFunc(r.configMaps, func(c *corev1.ConfigMap) bool { return c.Name == name })
	}
	for _, w := range r.workloads() {
		if w.pod.Namespace != "" {
			continue
		}
		for _, c := range w.pod.Spec.Containers {
			for _, e := range c.Env {
				if e.ValueFrom == nil {
					continue
				}
				if s := e.ValueFrom.SecretKeyRef; s != nil && !has("Secret", s.Name) {
					t.Errorf("%s %s reads Secret %s, which the overlay does not create", w.kind, w.name, s.Name)
				}
				if cm := e.ValueFrom.ConfigMapKeyRef; cm != nil && !has("ConfigMap", cm.Name) {
					t.Errorf("%s %s reads ConfigMap %s, which the overlay does not create", w.kind, w.name, cm.Name)
				}
			}
		}
		for _, s := range mountedSecrets(w.pod) {
			if !has("Secret", s) {
				t.Errorf("%s %s mounts Secret %s, which the overlay neither creates nor has cert-manager issue", w.kind, w.name, s)
			}
		}
	}
	// The CA: a self-signed bootstrap writes the Secret the CA Issuer reads.
	for _, is := range r.issuers {
		if is.Spec.CA == nil {
			continue
		}
		ca := certBySecret(r, is.Spec.CA.SecretName)
		if ca == nil || !ca.Spec.IsCA || issuerOf(r, ca) == nil || issuerOf(r, ca).Spec.SelfSigned == nil {
			t.Errorf("Issuer %s signs with Secret %s, which no self-signed CA Certificate of the dev overlay writes", is.Metadata.Name, is.Spec.CA.SecretName)
		}
	}
	// What the host reaches through kind's port mappings (the gateway's
	// NodePort, the external listeners) is verified for localhost.
	for _, w := range r.workloads() {
		if w.name != "gateway" {
			continue
		}
		for _, c := range certsOf(t, r, w) {
			if !slices.Contains(c.Spec.DNSNames, "localhost") {
				t.Errorf("Certificate %s (the gateway's, reached at localhost:9092 on kind) does not name localhost: %v", c.Name(), c.Spec.DNSNames)
			}
		}
	}
	if len(r.namespaces) != 1 || r.namespaces[0].Name != "strata" {
		t.Errorf("the dev overlay should create namespace strata, has %v", r.namespaces)
	}
	kind, err := readFile("k8s/overlays/dev/kind.yaml")
	if err != nil {
		t.Fatal(err)
	}
	mapped := map[string]bool{}
	for _, m := range regexp.MustCompile(`containerPort: (\d+), hostPort: (\d+)`).FindAllStringSubmatch(kind, -1) {
		mapped[m[1]+"->"+m[2]] = true
	}
	for _, s := range r.services {
		for _, p := range s.Spec.Ports {
			if p.NodePort != 0 && s.Name != "gateway" && !mapped[fmt.Sprintf("%d->%d", p.NodePort, p.NodePort)] {
				t.Errorf("Service %s: node port %d is not mapped to the same host port in kind.yaml", s.Name, p.NodePort)
			}
		}
	}
	if !mapped["30092->9092"] {
		t.Errorf("kind.yaml must map the gateway's node port 30092 to localhost:9092")
	}
}
