package check

import (
	"bufio"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// repoRoot is the repository root, two levels above this module.
var repoRoot = func() string {
	abs, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		panic(err)
	}
	return abs
}()

// binaryFor maps a container image name to the binary its Dockerfile
// target runs (strata/gateway:dev -> strata-gateway). ok is false for an
// image that runs none of servicePkgs' binaries (another project's, or
// strata/certs, the compose cluster's certificate step).
func binaryFor(image string) (string, bool) {
	name, _, _ := strings.Cut(image, ":")
	svc, ok := strings.CutPrefix(name, "strata/")
	if !ok {
		return "", false
	}
	bin := "strata-" + svc
	if svc == "strata" {
		bin = "strata"
	}
	for _, pkg := range servicePkgs {
		if filepath.Base(pkg) == bin {
			return bin, true
		}
	}
	return "", false
}

// testVersion is stamped into the binaries the tests build.
const testVersion = "v0.0.0-check"

// servicePkgs are the main packages of the CLI and every service.
var servicePkgs = []string{
	"./cmd/strata",
	"./services/controller/cmd/strata-controller",
	"./services/storage/cmd/strata-storage",
	"./services/gateway/cmd/strata-gateway",
	"./services/coordinator/cmd/strata-coordinator",
	"./services/tiering/cmd/strata-tiering",
}

var built struct {
	once sync.Once
	dir  string
	err  error
	out  string
}

// buildBinaries builds every binary once per test binary, with the
// default toolchain settings (so the build cache of make build and the
// process tests serves it), for their --help.
func buildBinaries(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "strata-check-bin-")
		if built.err != nil {
			return
		}
		cmd := exec.Command("go", append([]string{"build", "-o", built.dir + "/"}, servicePkgs...)...)
		cmd.Dir = repoRoot
		out, err := cmd.CombinedOutput()
		built.err, built.out = err, string(out)
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if composeCertsRun.dir != "" {
		os.RemoveAll(composeCertsRun.dir)
	}
	os.Exit(code)
}

// flagSet is what a binary's --help declares: flag names and the
// environment variables that stand for them.
type flagSet struct {
	flags map[string]bool
	env   map[string]bool
}

var (
	helpFlag = regexp.MustCompile(`^  --([a-z0-9][a-z0-9.-]*)\b`)
	helpEnv  = regexp.MustCompile(`\b(STRATA_[A-Z0-9_]+)`)
)

var helps struct {
	mu  sync.Mutex
	got map[string]flagSet
}

// help runs `bin --help` from the build and parses its flags.
func help(t *testing.T, bin string) flagSet {
	t.Helper()
	helps.mu.Lock()
	defer helps.mu.Unlock()
	if fs, ok := helps.got[bin]; ok {
		return fs
	}
	out, err := exec.Command(filepath.Join(buildBinaries(t), bin), "--help").Output()
	if err != nil {
		t.Fatalf("%s --help: %v", bin, err)
	}
	fs := flagSet{flags: map[string]bool{}, env: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if m := helpFlag.FindStringSubmatch(sc.Text()); m != nil {
			fs.flags[m[1]] = true
		}
		for _, m := range helpEnv.FindAllStringSubmatch(sc.Text(), -1) {
			fs.env[m[1]] = true
		}
	}
	if len(fs.flags) < 2 {
		t.Fatalf("%s --help declared only %v:\n%s", bin, fs.flags, out)
	}
	if helps.got == nil {
		helps.got = map[string]flagSet{}
	}
	helps.got[bin] = fs
	return fs
}

// checkArgs reports every --flag in args that bin does not declare, and
// every STRATA_* variable in env it does not read. what names the caller.
func checkArgs(t *testing.T, what, bin string, args, env []string) {
	t.Helper()
	fs := help(t, bin)
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !fs.flags[name] {
			t.Errorf("%s: %s passes %s, which `%s --help` does not list", what, bin, a, bin)
		}
	}
	for _, e := range env {
		if strings.HasPrefix(e, "STRATA_") && !fs.env[e] {
			t.Errorf("%s: %s gets %s, which `%s --help` does not list", what, bin, e, bin)
		}
	}
}

// TestImageBuild checks the image build, deploy/docker/build.sh, which the
// Dockerfile runs: the binary it gives is statically linked (no ELF
// interpreter, so it runs on a distroless static base), built with cgo off,
// and carries the version given to the build. It builds one service, the
// gateway: a static build compiles its dependencies again (cgo off changes
// every package that imports net), and the flags are the same for every
// binary.
func TestImageBuild(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sh", "deploy/docker/build.sh", dir, testVersion, "./services/gateway/cmd/strata-gateway")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("deploy/docker/build.sh: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "strata-gateway")
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("strata-gateway is dynamically linked (has an ELF interpreter)")
		}
	}
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range bi.Settings {
		if s.Key == "CGO_ENABLED" && s.Value != "0" {
			t.Errorf("built with CGO_ENABLED=%s", s.Value)
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw, []byte(testVersion)) {
		t.Errorf("strata-gateway does not carry the version %q given to build.sh", testVersion)
	}
}
