package check

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// dockerTargets parses deploy/docker/Dockerfile: each stage name, with
// the lines of its stage.
func dockerTargets(t *testing.T) map[string][]string {
	t.Helper()
	src, err := readFile("docker/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stage := regexp.MustCompile(`(?i)^FROM\s+\S+\s+AS\s+(\S+)$`)
	out := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(src, "\n") {
		l = strings.TrimSpace(l)
		if m := stage.FindStringSubmatch(l); m != nil {
			cur = m[1]
			out[cur] = nil
			continue
		}
		if cur != "" && l != "" && !strings.HasPrefix(l, "#") {
			out[cur] = append(out[cur], l)
		}
	}
	return out
}

// TestDockerfile checks that every binary has an image target that copies
// it from the build and runs it, on a runtime stage that is distroless and
// non-root.
func TestDockerfile(t *testing.T) {
	targets := dockerTargets(t)
	runtime := strings.Join(targets["runtime"], "\n")
	if !strings.Contains(runtime, "USER 65532:65532") {
		t.Errorf("the runtime stage must run as the non-root user 65532:\n%s", runtime)
	}
	src, _ := readFile("docker/Dockerfile")
	if !regexp.MustCompile(`ARG BASE=gcr.io/distroless/static-debian\d+:nonroot`).MatchString(src) || !strings.Contains(src, "FROM ${BASE} AS runtime") {
		t.Errorf("the runtime stage must be distroless static, non-root")
	}
	if !slices.ContainsFunc(targets["build"], func(l string) bool { return strings.Contains(l, "deploy/docker/build.sh /out") }) {
		t.Errorf("the build stage must run deploy/docker/build.sh")
	}
	for _, pkg := range servicePkgs {
		bin := filepath.Base(pkg)
		target := strings.TrimPrefix(bin, "strata-")
		lines := strings.Join(targets[target], "\n")
		if !strings.Contains(lines, "COPY --from=build /out/"+bin+" /usr/local/bin/"+bin) ||
			!strings.Contains(lines, `ENTRYPOINT ["/usr/local/bin/`+bin+`"]`) {
			t.Errorf("target %s must copy and run /usr/local/bin/%s:\n%s", target, bin, lines)
		}
		if _, err := os.Stat(filepath.Join(repoRoot, pkg)); err != nil {
			t.Errorf("%s: %v", pkg, err)
		}
	}
	if _, err := os.Stat(filepath.Join(repoRoot, ".dockerignore")); err != nil {
		t.Errorf("the build context needs a .dockerignore: %v", err)
	}
}

// loadCompose parses deploy/compose/compose.yaml as Docker Compose does,
// every profile included and nothing taken from this environment.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	dir := filepath.Join(repoRoot, "deploy", "compose")
	details, err := loader.LoadConfigFiles(context.Background(), []string{filepath.Join(dir, "compose.yaml")}, dir)
	if err != nil {
		t.Fatal(err)
	}
	details.Environment = types.Mapping{}
	project, err := loader.LoadWithContext(context.Background(), *details, func(o *loader.Options) {
		o.SetProjectName("strata", true)
		o.Profiles = []string{"*"}
	})
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return project
}

// TestCompose parses deploy/compose/compose.yaml as Docker Compose does and
// checks it: every Strata service is built by the Dockerfile's matching
// target and passes only flags and STRATA_* variables its binary declares
// (health checks included); the load balancer is the only service with
// published ports and publishes every external address a service
// advertises; every file mounted exists; haproxy accepts the configs the
// load balancer loads.
func TestCompose(t *testing.T) {
	project := loadCompose(t)
	targets := dockerTargets(t)
	dockerfile := filepath.Join(repoRoot, "deploy", "docker", "Dockerfile")

	var published []string
	advertised := map[string]string{} // external port -> service
	external := regexp.MustCompile(`external=https?://localhost:(\d+)`)
	seen := map[string]bool{}
	for name, svc := range project.Services {
		for _, p := range svc.Ports {
			if name != "lb" {
				t.Errorf("service %s publishes %s; only the load balancer may", name, p.Published)
			}
			published = append(published, p.Published)
		}
		for _, v := range svc.Volumes {
			if v.Type == types.VolumeTypeBind {
				if _, err := os.Stat(v.Source); err != nil {
					t.Errorf("service %s mounts %s: %v", name, v.Source, err)
				}
			}
		}
		bin, ok := binaryFor(svc.Image)
		if !ok {
			continue
		}
		seen[bin] = true
		b := svc.Build
		if b == nil || filepath.Join(b.Context, b.Dockerfile) != dockerfile || b.Target != strings.TrimPrefix(bin, "strata-") || targets[b.Target] == nil {
			t.Errorf("service %s (image %s) must be built from deploy/docker/Dockerfile target %s; build is %+v", name, svc.Image, strings.TrimPrefix(bin, "strata-"), b)
		}
		var env []string
		for k := range svc.Environment {
			env = append(env, k)
		}
		checkArgs(t, "compose service "+name, bin, svc.Command, env)
		for _, a := range svc.Command {
			if m := external.FindStringSubmatch(a); m != nil {
				advertised[m[1]] = name
			}
		}
		if bin == "strata" {
			continue
		}
		hc := svc.HealthCheck
		if hc == nil || len(hc.Test) != 4 || hc.Test[0] != "CMD" || hc.Test[1] != "/usr/local/bin/"+bin || hc.Test[2] != "--probe" {
			t.Errorf("service %s: health check must be [CMD /usr/local/bin/%s --probe URL], is %v", name, bin, hc)
			continue
		}
		_, adminPort, _ := strings.Cut(flagValue(svc.Command, "admin-listen"), ":")
		// https: the admin port speaks TLS (the cluster is secure), and
		// the probe reads the TLS files from the service's environment.
		if want := "https://127.0.0.1:" + adminPort + "/readyz"; hc.Test[3] != want {
			t.Errorf("service %s: health check probes %s, want %s (its --admin-listen, over TLS)", name, hc.Test[3], want)
		}
		checkArgs(t, "compose service "+name+" health check", bin, hc.Test[2:], nil)
	}
	for port, svc := range advertised {
		if !slices.Contains(published, port) {
			t.Errorf("service %s advertises localhost:%s, which the load balancer does not publish", svc, port)
		}
	}
	for _, pkg := range servicePkgs {
		if bin := filepath.Base(pkg); !seen[bin] {
			t.Errorf("compose.yaml runs no %s", bin)
		}
	}
	if !slices.Contains(published, "9092") {
		t.Errorf("the load balancer must publish the gateway port 9092, publishes %v", published)
	}

	checkHAProxy(t, project.Services["lb"])
}

// checkHAProxy runs haproxy -c on the configs the load balancer service
// loads (each -f of its command), read from the files mounted there, in
// the same order: deploy/haproxy/gateways.cfg, then compose's haproxy.cfg.
// The certificate volume it mounts (the CA of its TLS health checks) is
// what certs.sh makes: haproxy -c loads the CA, so the configs are checked
// with the container's path to it replaced by the files certs.sh wrote here.
func checkHAProxy(t *testing.T, lb types.ServiceConfig) {
	t.Helper()
	mounted := map[string]string{} // path in the container -> file here
	volumes := map[string]string{} // directory in the container -> certs.sh's directory here
	for _, v := range lb.Volumes {
		switch v.Type {
		case types.VolumeTypeBind:
			mounted[v.Target] = v.Source
		case types.VolumeTypeVolume:
			dir, ok := strings.CutPrefix(v.Source, "tls-")
			if !ok {
				t.Errorf("the load balancer mounts volume %s, which certs.sh does not fill", v.Source)
				continue
			}
			volumes[v.Target] = filepath.Join(composeCerts(t), dir)
		}
	}
	args := []string{"-c"}
	for i, a := range lb.Command {
		if a != "-f" || i+1 == len(lb.Command) {
			continue
		}
		src, ok := mounted[lb.Command[i+1]]
		if !ok {
			t.Errorf("the load balancer loads %s, which is not mounted", lb.Command[i+1])
			continue
		}
		if len(args) == 1 {
			if want := filepath.Join(repoRoot, "deploy", "haproxy", "gateways.cfg"); src != want {
				t.Errorf("the load balancer must load %s first (the balancer's settings), loads %s", want, src)
			}
		}
		cfg, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		text := string(cfg)
		for target, here := range volumes {
			text = strings.ReplaceAll(text, target, here)
		}
		local := filepath.Join(t.TempDir(), filepath.Base(src))
		if err := os.WriteFile(local, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-f", local)
	}
	if len(args) < 3 {
		t.Errorf("the load balancer loads no config: %v", lb.Command)
	}
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Fatalf("haproxy is not installed (apt-get install haproxy; .ci/run does): %v", err)
	}
	out, err := exec.Command(haproxy, args...).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Configuration file is valid") {
		t.Errorf("haproxy %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
