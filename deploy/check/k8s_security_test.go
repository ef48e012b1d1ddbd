package check

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// certificate is the part of cert-manager's cert-manager.io/v1
// Certificate these manifests use, each field named as cert-manager's API
// names it, so that strict decoding refuses a misspelt or unknown one.
type certificate struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SecretName  string `json:"secretName"`
		CommonName  string `json:"commonName,omitempty"`
		Duration    string `json:"duration,omitempty"`
		RenewBefore string `json:"renewBefore,omitempty"`
		IsCA        bool   `json:"isCA,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			Encoding       string `json:"encoding,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		Usages    []string  `json:"usages,omitempty"`
		URIs      []string  `json:"uris,omitempty"`
		DNSNames  []string  `json:"dnsNames,omitempty"`
		IssuerRef issuerRef `json:"issuerRef"`
	} `json:"spec"`
}

// Name is the Certificate's name.
func (c *certificate) Name() string { return c.Metadata.Name }

type issuerRef struct {
	Name  string `json:"name"`
	Kind  string `json:"kind,omitempty"`
	Group string `json:"group,omitempty"`
}

// issuer is the part of cert-manager.io/v1 Issuer these manifests use.
type issuer struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// Values cert-manager accepts (its API reference), for the fields here.
var (
	certUsages     = []string{"signing", "digital signature", "content commitment", "key encipherment", "key agreement", "data encipherment", "cert sign", "crl sign", "encipher only", "decipher only", "any", "server auth", "client auth", "code signing", "email protection", "s/mime", "ipsec end system", "ipsec tunnel", "ipsec user", "timestamping", "ocsp signing", "microsoft sgc", "netscape sgc"}
	keyAlgorithms  = []string{"RSA", "ECDSA", "Ed25519"}
	keyEncodings   = []string{"PKCS1", "PKCS8"}
	keyRotations   = []string{"Never", "Always"}
	issuerKinds    = []string{"Issuer", "ClusterIssuer"}
	identityURI    = regexp.MustCompile(`^spiffe://strata/(controller|storage|gateway|coordinator|tiering)(?:/([A-Za-z0-9][A-Za-z0-9._-]{0,63}))?$`)
	tlsFileFlags   = []string{"tls-cert", "tls-key", "tls-client-ca"}
	tlsFileKeys    = map[string]string{"tls-cert": "tls.crt", "tls-key": "tls.key", "tls-client-ca": "ca.crt"}
	strataURLFlags = []string{"controller", "coordinator", "gateway", "tiering", "advertise", "advertise-url", "advertise-listeners"}
)

// superUser is the principal every service names in --super-users, and the
// admin certificate's.
const superUser = "User:admin"

// strataContainers lists a workload's Strata containers with their binary.
func strataContainers(w workload) map[*corev1.Container]string {
	out := map[*corev1.Container]string{}
	for i := range w.pod.Spec.Containers {
		c := &w.pod.Spec.Containers[i]
		if bin, ok := binaryFor(c.Image); ok {
			out[c] = bin
		}
	}
	return out
}

// checkEtcdClient fails unless the controller with args serves its etcd
// client listener on a Unix socket in its data directory, which only the
// controller's user may open, rather than on a TCP port.
func checkEtcdClient(t *testing.T, what string, args []string) {
	t.Helper()
	if hasFlag(args, "etcd-client-port") {
		t.Errorf("%s: --etcd-client-port puts etcd on a TCP port; use --etcd-client unix://", what)
	}
	dir := flagValue(args, "data-dir")
	if ec := flagValue(args, "etcd-client"); dir == "" || !strings.HasPrefix(ec, "unix://"+strings.TrimSuffix(dir, "/")+"/") {
		t.Errorf("%s: --etcd-client %q; want a unix:// socket in --data-dir %s", what, ec, dir)
	}
}

// hasFlag reports a boolean flag given bare or as =true.
func hasFlag(args []string, name string) bool {
	return slices.Contains(args, "--"+name) || slices.Contains(args, "--"+name+"=true")
}

// urlsOf returns the URLs a URL flag's value holds: a comma-separated list,
// and for --advertise-listeners name=URL pairs.
func urlsOf(flag, value string) []string {
	var out []string
	for _, v := range strings.Split(value, ",") {
		if v = strings.TrimSpace(v); v == "" {
			continue
		}
		if flag == "advertise-listeners" {
			_, v, _ = strings.Cut(v, "=")
		}
		out = append(out, v)
	}
	return out
}

// checkSecurity holds for the base and every overlay: no Service that
// reaches outside the cluster carries an admin port, and every Strata
// container runs with TLS (--tls-cert, --tls-key, --tls-client-ca, all
// three files from one Secret-backed volume mounted read-only, readable by
// no one but the owner and the pod's group), with --require-auth,
// User:admin among --super-users and the controllers whose metadata stream
// brings the ACLs, and every URL it is given or advertises is https.
func checkSecurity(t *testing.T, r *rendered) {
	t.Helper()
	// Admin ports ask for no credentials: they stay inside the cluster.
	for _, s := range r.services {
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer && s.Spec.Type != corev1.ServiceTypeNodePort {
			continue
		}
		for _, p := range s.Spec.Ports {
			if p.Name == "metrics" || p.TargetPort.StrVal == "metrics" {
				t.Errorf("%s: %s Service %s exposes the admin port (%s) outside the cluster", r.path, s.Spec.Type, s.Name, p.Name)
			}
		}
	}
	for _, w := range r.workloads() {
		for c, bin := range strataContainers(w) {
			cw := fmt.Sprintf("%s: %s %s container %s", r.path, w.kind, w.name, c.Name)
			if !hasFlag(c.Args, "require-auth") {
				t.Errorf("%s: runs without --require-auth", cw)
			}
			if supers := strings.Split(flagValue(c.Args, "super-users"), ","); !slices.Contains(supers, superUser) {
				t.Errorf("%s: --super-users %q does not name %s", cw, flagValue(c.Args, "super-users"), superUser)
			}
			// The ACLs reach every service but the controller through the
			// controllers' metadata stream.
			if bin != "strata-controller" && flagValue(c.Args, "controller") == "" {
				t.Errorf("%s: has no --controller, so no ACLs to enforce", cw)
			}
			if bin == "strata-controller" {
				checkEtcdClient(t, cw, c.Args)
			}
			var dirs []string
			for _, f := range tlsFileFlags {
				path := flagValue(c.Args, f)
				if path == "" {
					t.Errorf("%s: %s runs without --%s", cw, bin, f)
					continue
				}
				m, vol := mountOf(w.pod, c, path)
				if m == nil {
					t.Errorf("%s: --%s %s is on no volume the container mounts", cw, f, path)
					continue
				}
				dirs = append(dirs, m.MountPath)
				if !m.ReadOnly {
					t.Errorf("%s: the TLS volume %s must be mounted read-only", cw, m.Name)
				}
				checkSecretVolume(t, cw, vol)
			}
			if len(slices.Compact(dirs)) > 1 {
				t.Errorf("%s: certificate, key and CA come from different volumes %v", cw, dirs)
			}
			for _, f := range strataURLFlags {
				for _, u := range urlsOf(f, flagValue(c.Args, f)) {
					if !strings.HasPrefix(u, "https://") {
						t.Errorf("%s: --%s %s is not https", cw, f, u)
					}
				}
			}
		}
	}
}

// mountOf returns the container's volume mount a file path lies under, and
// the pod's volume it mounts.
func mountOf(pod *corev1.PodTemplateSpec, c *corev1.Container, path string) (*corev1.VolumeMount, *corev1.Volume) {
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			for j := range pod.Spec.Volumes {
				if pod.Spec.Volumes[j].Name == m.Name {
					return m, &pod.Spec.Volumes[j]
				}
			}
			return m, nil
		}
	}
	return nil, nil
}

// checkSecretVolume requires a volume of Secrets only, whose files others
// cannot read.
func checkSecretVolume(t *testing.T, what string, v *corev1.Volume) {
	t.Helper()
	if v == nil {
		t.Errorf("%s: the TLS volume is not in the pod", what)
		return
	}
	var mode *int32
	switch {
	case v.Secret != nil:
		mode = v.Secret.DefaultMode
	case v.Projected != nil:
		mode = v.Projected.DefaultMode
		for _, s := range v.Projected.Sources {
			if s.Secret == nil {
				t.Errorf("%s: the TLS volume %s projects something other than a Secret", what, v.Name)
			}
		}
	default:
		t.Errorf("%s: the TLS volume %s is not a Secret", what, v.Name)
		return
	}
	if mode == nil || *mode&0o007 != 0 {
		t.Errorf("%s: the TLS volume %s must set defaultMode without permissions for others (0440), has %v", what, v.Name, mode)
	}
}

// mountedSecrets lists every Secret a pod's volumes read.
func mountedSecrets(pod *corev1.PodTemplateSpec) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			out = append(out, v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					out = append(out, s.Secret.Name)
				}
			}
		}
	}
	return out
}

// secretOf returns the Secret and its key a file path of the container
// reads (a Secret volume's key, or a projected Secret item's path).
func secretOf(pod *corev1.PodTemplateSpec, c *corev1.Container, path string) (secret, key string) {
	m, v := mountOf(pod, c, path)
	if m == nil || v == nil {
		return "", ""
	}
	rel := strings.TrimPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/")
	if v.Secret != nil {
		for _, it := range v.Secret.Items {
			if it.Path == rel {
				return v.Secret.SecretName, it.Key
			}
		}
		if len(v.Secret.Items) == 0 {
			return v.Secret.SecretName, rel
		}
	}
	if v.Projected != nil {
		for _, s := range v.Projected.Sources {
			if s.Secret == nil {
				continue
			}
			for _, it := range s.Secret.Items {
				if it.Path == rel {
					return s.Secret.Name, it.Key
				}
			}
		}
	}
	return "", ""
}

// podInstance is one pod a workload runs: its name and the values of the
// downward-API variables its arguments use.
type podInstance struct {
	name string
	vars map[string]string
}

// instances lists a workload's pods: each ordinal of a StatefulSet, one
// representative pod of a Deployment.
func instances(r *rendered, w workload) []podInstance {
	if w.kind != "StatefulSet" {
		return []podInstance{{name: w.name, vars: map[string]string{}}}
	}
	var n int32 = 1
	for _, s := range r.statefulSets {
		if s.Name == w.name && s.Spec.Replicas != nil {
			n = *s.Spec.Replicas
		}
	}
	var out []podInstance
	for i := range n {
		name := fmt.Sprintf("%s-%d", w.name, i)
		out = append(out, podInstance{name: name, vars: map[string]string{"POD_NAME": name, "POD_INDEX": strconv.Itoa(int(i))}})
	}
	return out
}

// subst replaces $(VAR) with the pod's value.
func (p podInstance) subst(s string) string {
	return varRef.ReplaceAllStringFunc(s, func(m string) string {
		if v, ok := p.vars[varRef.FindStringSubmatch(m)[1]]; ok {
			return v
		}
		return m
	})
}

func certBySecret(r *rendered, secret string) *certificate {
	for _, c := range r.certificates {
		if c.Spec.SecretName == secret {
			return c
		}
	}
	return nil
}

func issuerOf(r *rendered, c *certificate) *issuer {
	for _, is := range r.issuers {
		if is.Metadata.Name == c.Spec.IssuerRef.Name && c.Spec.IssuerRef.Kind == "Issuer" {
			return is
		}
	}
	return nil
}

// certsOf returns the Certificates a workload's Strata containers serve,
// one per pod.
func certsOf(t *testing.T, r *rendered, w workload) []*certificate {
	t.Helper()
	var out []*certificate
	for c := range strataContainers(w) {
		for _, p := range instances(r, w) {
			secret, _ := secretOf(w.pod, c, p.subst(flagValue(c.Args, "tls-cert")))
			if cert := certBySecret(r, secret); cert != nil {
				out = append(out, cert)
			}
		}
	}
	return out
}

// checkCertificates holds for an overlay with cert-manager: every
// Certificate is well-formed for cert-manager and signed by a CA Issuer of
// the overlay; every pod of every Strata workload serves a Certificate
// whose one URI is its role's identity (a storage node's, its node id), for
// server and client auth, from the same Secret as its key and CA, naming
// every host it advertises; every https URL a container is given names a
// host that the Certificate of each pod behind it names; and the admin's
// client certificate is the super user's.
func checkCertificates(t *testing.T, r *rendered) {
	t.Helper()
	if len(r.certificates) == 0 {
		t.Fatalf("%s: no Certificate", r.path)
	}
	for _, c := range r.certificates {
		what := fmt.Sprintf("%s: Certificate %s", r.path, c.Name())
		s := c.Spec
		if s.SecretName == "" || s.IssuerRef.Name == "" || !slices.Contains(issuerKinds, s.IssuerRef.Kind) || s.IssuerRef.Group != "cert-manager.io" {
			t.Errorf("%s: needs a secretName and an issuerRef to a cert-manager.io Issuer, has %+v", what, s)
		}
		for _, u := range s.Usages {
			if !slices.Contains(certUsages, u) {
				t.Errorf("%s: usage %q is not one cert-manager knows", what, u)
			}
		}
		if k := s.PrivateKey; k == nil || !slices.Contains(keyAlgorithms, k.Algorithm) || (k.Encoding != "" && !slices.Contains(keyEncodings, k.Encoding)) ||
			(k.RotationPolicy != "" && !slices.Contains(keyRotations, k.RotationPolicy)) {
			t.Errorf("%s: privateKey %+v: want an algorithm, encoding and rotation policy cert-manager knows", what, s.PrivateKey)
		}
		if s.Duration != "" {
			d, err := time.ParseDuration(s.Duration)
			rb, err2 := time.ParseDuration(cmp(s.RenewBefore, "0s"))
			if err != nil || err2 != nil || rb >= d {
				t.Errorf("%s: duration %q and renewBefore %q: want Go durations, renewing before the end", what, s.Duration, s.RenewBefore)
			}
		}
		is := issuerOf(r, c)
		if is == nil {
			t.Errorf("%s: its Issuer %s is not in the overlay", what, s.IssuerRef.Name)
		} else if !s.IsCA && is.Spec.CA == nil {
			t.Errorf("%s: signed by Issuer %s, which is not a CA Issuer", what, is.Metadata.Name)
		}
		for _, u := range s.URIs {
			if !identityURI.MatchString(u) {
				t.Errorf("%s: URI %s is not a Strata identity (spiffe://strata/<role>[/<id>])", what, u)
			}
		}
	}

	served := map[string]*certificate{} // pod name -> the Certificate it serves
	for _, w := range r.workloads() {
		for c, bin := range strataContainers(w) {
			role := strings.TrimPrefix(bin, "strata-")
			for _, p := range instances(r, w) {
				what := fmt.Sprintf("%s: %s %s pod %s", r.path, w.kind, w.name, p.name)
				var secret string
				for _, f := range tlsFileFlags {
					s, key := secretOf(w.pod, c, p.subst(flagValue(c.Args, f)))
					if key != tlsFileKeys[f] || (secret != "" && s != secret) {
						t.Errorf("%s: --%s reads %s key %q; want key %s of the Secret all three files come from", what, f, s, key, tlsFileKeys[f])
					}
					secret = s
				}
				cert := certBySecret(r, secret)
				if cert == nil {
					t.Errorf("%s: serves Secret %q, which no Certificate issues", what, secret)
					continue
				}
				served[p.name] = cert
				want := "spiffe://strata/" + role
				if role == "storage" {
					id := p.subst(flagValue(c.Args, "node-id"))
					if _, err := strconv.ParseUint(id, 10, 31); err != nil {
						t.Errorf("%s: --node-id %q is not a node id", what, id)
					}
					want += "/" + id
				}
				if got := cert.Spec.URIs; len(got) != 1 || (got[0] != want && !strings.HasPrefix(got[0], want+"/")) || (role == "storage" && got[0] != want) {
					t.Errorf("%s: Certificate %s names %v; want exactly one identity, %s", what, cert.Name(), got, want)
				}
				if !slices.Contains(cert.Spec.Usages, "server auth") || !slices.Contains(cert.Spec.Usages, "client auth") {
					t.Errorf("%s: Certificate %s must be for server and client auth (services call each other with mutual TLS), has %v", what, cert.Name(), cert.Spec.Usages)
				}
				for _, f := range []string{"advertise", "advertise-url", "advertise-listeners"} {
					for _, u := range urlsOf(f, p.subst(flagValue(c.Args, f))) {
						if h := hostOf(u); !slices.Contains(cert.Spec.DNSNames, h) {
							t.Errorf("%s: advertises %s, but Certificate %s does not name %s (names %v)", what, u, cert.Name(), h, cert.Spec.DNSNames)
						}
					}
				}
			}
		}
	}

	// Every host a container is told to call is named by the certificate
	// of each pod that can answer there.
	for _, w := range r.workloads() {
		for c := range strataContainers(w) {
			for _, f := range []string{"controller", "coordinator", "gateway", "tiering"} {
				for _, u := range urlsOf(f, flagValue(c.Args, f)) {
					h := hostOf(u)
					pods := podsAt(r, h)
					if len(pods) == 0 {
						t.Errorf("%s: %s %s: --%s %s: no Service or pod is named %s", r.path, w.kind, w.name, f, u, h)
					}
					for _, p := range pods {
						if cert := served[p]; cert != nil && !slices.Contains(cert.Spec.DNSNames, h) {
							t.Errorf("%s: %s %s calls %s, but pod %s serves Certificate %s, which does not name %s (names %v)", r.path, w.kind, w.name, u, p, cert.Name(), h, cert.Spec.DNSNames)
						}
					}
				}
			}
		}
	}

	// The admin's client certificate: CN admin, the super user, client auth only.
	admins := 0
	for _, c := range r.certificates {
		if "User:"+c.Spec.CommonName != superUser {
			continue
		}
		admins++
		if len(c.Spec.URIs) > 0 || len(c.Spec.DNSNames) > 0 || slices.Contains(c.Spec.Usages, "server auth") || !slices.Contains(c.Spec.Usages, "client auth") {
			t.Errorf("%s: Certificate %s (the admin's) must be for client auth only, with no identity URI or DNS name: %+v", r.path, c.Name(), c.Spec)
		}
	}
	if admins != 1 {
		t.Errorf("%s: want one client Certificate with commonName admin (%s, the super user), have %d", r.path, superUser, admins)
	}
}

func cmp(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// hostOf returns a URL's host without its port.
func hostOf(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return p.Hostname()
}

// podsAt lists the pods that answer at a host: a Service's name (the pods
// it selects), or a StatefulSet pod's name under its headless Service
// (<pod>.<service>).
func podsAt(r *rendered, host string) []string {
	var out []string
	if pod, svc, ok := strings.Cut(host, "."); ok {
		for _, s := range r.statefulSets {
			if s.Spec.ServiceName != svc {
				continue
			}
			for _, p := range instances(r, workload{kind: "StatefulSet", name: s.Name}) {
				if p.name == pod {
					out = append(out, p.name)
				}
			}
		}
		return out
	}
	svc := r.service(host)
	if svc == nil || len(svc.Spec.Selector) == 0 {
		return nil
	}
	for _, w := range r.workloads() {
		if labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.pod.Labels)) {
			for _, p := range instances(r, w) {
				out = append(out, p.name)
			}
		}
	}
	return out
}

// TestKubernetesCertManagerOverlay checks the overlay that issues the base's
// certificates with cert-manager: it renders and decodes (Certificates and
// Issuers included), keeps the workload and security invariants, and its
// Certificates are the ones every pod needs (checkCertificates).
func TestKubernetesCertManagerOverlay(t *testing.T) {
	r := render(t, "k8s/overlays/cert-manager")
	checkWorkloads(t, r)
	checkSecurity(t, r)
	checkCertificates(t, r)
	var ca []string
	for _, is := range r.issuers {
		if is.Spec.CA != nil {
			ca = append(ca, is.Spec.CA.SecretName)
		}
	}
	if len(ca) != 1 {
		t.Errorf("want one CA Issuer (signing with the Secret the operator brings), have %v", ca)
	}
	for _, w := range r.workloads() {
		for _, s := range mountedSecrets(w.pod) {
			if certBySecret(r, s) == nil {
				t.Errorf("%s %s mounts Secret %s, which no Certificate of the overlay issues", w.kind, w.name, s)
			}
		}
	}
	var sts []string
	for _, s := range r.statefulSets {
		sts = append(sts, s.Name)
	}
	if !slices.Contains(sts, "coordinator") {
		t.Errorf("coordinators must be a StatefulSet (stable names a certificate can carry), StatefulSets are %v", sts)
	}
}
