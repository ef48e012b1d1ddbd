package check

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// documentedMetrics reads the Prometheus names of the metrics table in
// docs/operations.md: the first column of each row that names one.
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	src, err := readRepoFile("docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `((?:strata|rpc)_[a-z_]+)` \\|")
	out := map[string]bool{}
	for _, l := range strings.Split(src, "\n") {
		if m := row.FindStringSubmatch(l); m != nil {
			out[m[1]] = true
		}
	}
	if len(out) < 15 {
		t.Fatalf("docs/operations.md lists %d metrics; the table was not found", len(out))
	}
	return out
}

// metricRef finds the Strata and RPC metric names in a PromQL expression.
var metricRef = regexp.MustCompile(`\b((?:strata|rpc)_[a-z_]+)\b`)

// rpcLabels are label names that metricRef also matches.
var rpcLabels = map[string]bool{"rpc_method": true, "rpc_response_status_code": true, "rpc_system_name": true}

// metricsIn returns the documented names an expression uses, and the
// names it uses that are not documented. A histogram's _bucket, _count
// and _sum series count as the histogram.
func metricsIn(expr string, documented map[string]bool) (used, unknown []string) {
	for _, m := range metricRef.FindAllString(expr, -1) {
		if rpcLabels[m] {
			continue
		}
		name := m
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(m, suffix); ok && documented[base] {
				name = base
			}
		}
		if documented[name] {
			used = append(used, name)
		} else {
			unknown = append(unknown, m)
		}
	}
	return used, unknown
}

// balanced reports whether an expression's brackets pair up.
func balanced(expr string) bool {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	inString := false
	for _, r := range expr {
		switch {
		case r == '"':
			inString = !inString
		case inString:
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && !inString
}

// TestGrafanaDashboard parses deploy/grafana/strata.json: panels with
// unique ids and a Prometheus data source, queries over documented metrics
// only, and every documented metric on some panel.
func TestGrafanaDashboard(t *testing.T) {
	documented := documentedMetrics(t)
	src, err := readFile("grafana/strata.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID         int    `json:"id"`
			Type       string `json:"type"`
			Title      string `json:"title"`
			Datasource *struct {
				Type string `json:"type"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(src), &dash); err != nil {
		t.Fatalf("grafana/strata.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Errorf("the dashboard needs a uid and a title")
	}
	vars := map[string]bool{"__all": true}
	for _, v := range dash.Templating.List {
		vars[v.Name] = true
	}
	onPanel := map[string]bool{}
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || len(p.Targets) == 0 {
			t.Errorf("panel %q needs a prometheus data source and a query", p.Title)
		}
		for _, tg := range p.Targets {
			used, unknown := metricsIn(tg.Expr, documented)
			if len(unknown) > 0 {
				t.Errorf("panel %q uses metrics docs/operations.md does not list: %v", p.Title, unknown)
			}
			if len(used) == 0 {
				t.Errorf("panel %q: query %q uses no Strata metric", p.Title, tg.Expr)
			}
			for _, u := range used {
				onPanel[u] = true
			}
			if !balanced(tg.Expr) {
				t.Errorf("panel %q: unbalanced brackets in %q", p.Title, tg.Expr)
			}
			for _, m := range regexp.MustCompile(`\$(\w+)`).FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[m[1]] {
					t.Errorf("panel %q uses the undefined variable $%s", p.Title, m[1])
				}
			}
		}
	}
	for m := range documented {
		if !onPanel[m] {
			t.Errorf("no panel shows %s", m)
		}
	}
}

// TestAlertRules parses deploy/prometheus/alerts.yaml: the alerts the
// operations page promises, each with a duration, a severity, a summary
// and an expression over documented metrics.
func TestAlertRules(t *testing.T) {
	documented := documentedMetrics(t)
	src, err := readFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	if err := yaml.UnmarshalStrict([]byte(src), &rules); err != nil {
		t.Fatalf("prometheus/alerts.yaml: %v", err)
	}
	have := map[string]string{}
	for _, g := range rules.Groups {
		if g.Name == "" {
			t.Errorf("a rule group has no name")
		}
		for _, r := range g.Rules {
			if r.Alert == "" || have[r.Alert] != "" {
				t.Errorf("alert %q: missing or repeated name", r.Alert)
			}
			have[r.Alert] = r.Expr
			if _, err := time.ParseDuration(r.For); err != nil {
				t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
			}
			if s := r.Labels["severity"]; s != "warning" && s != "critical" {
				t.Errorf("alert %s: severity %q, want warning or critical", r.Alert, s)
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("alert %s needs a summary and a description", r.Alert)
			}
			used, unknown := metricsIn(r.Expr, documented)
			if len(used) == 0 || len(unknown) > 0 {
				t.Errorf("alert %s: expression %q uses %v, undocumented %v", r.Alert, r.Expr, used, unknown)
			}
			if !balanced(r.Expr) {
				t.Errorf("alert %s: unbalanced brackets in %q", r.Alert, r.Expr)
			}
		}
	}
	for alert, metric := range map[string]string{
		"StrataUnderReplicatedPartitions": "strata_controller_partitions_under_replicated",
		"StrataOfflinePartitions":         "strata_controller_partitions_offline",
		"StrataConsumerLagGrowing":        "strata_coordinator_group_lag",
	} {
		if !strings.Contains(have[alert], metric) {
			t.Errorf("alert %s over %s is missing (have %v)", alert, metric, have)
		}
	}
	doc, _ := readRepoFile("docs/operations.md")
	for alert := range have {
		if !strings.Contains(doc, "`"+alert+"`") {
			t.Errorf("docs/operations.md does not describe the alert %s", alert)
		}
	}
}

// TestPrometheusScrapeConfig checks deploy/prometheus/prometheus.yaml
// against the compose cluster: it loads the alert rules, and scrapes every
// Strata service of compose.yaml at its admin port, over https verified
// with the cluster's CA.
func TestPrometheusScrapeConfig(t *testing.T) {
	src, err := readFile("prometheus/prometheus.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Global        map[string]string `json:"global"`
		RuleFiles     []string          `json:"rule_files"`
		ScrapeConfigs []struct {
			JobName   string `json:"job_name"`
			Scheme    string `json:"scheme"`
			TLSConfig struct {
				CAFile string `json:"ca_file"`
			} `json:"tls_config"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	if err := yaml.UnmarshalStrict([]byte(src), &cfg); err != nil {
		t.Fatalf("prometheus/prometheus.yaml: %v", err)
	}
	if !slices.Contains(cfg.RuleFiles, "alerts.yaml") {
		t.Errorf("rule_files %v does not load alerts.yaml", cfg.RuleFiles)
	}
	scraped := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		// The admin ports speak TLS: scrape them over https, verified.
		if sc.Scheme != "https" || sc.TLSConfig.CAFile == "" {
			t.Errorf("job %s must scrape https with the cluster's CA (tls_config.ca_file), has scheme %q ca_file %q", sc.JobName, sc.Scheme, sc.TLSConfig.CAFile)
		}
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				scraped[tg] = true
			}
		}
	}

	project := loadCompose(t)
	adminFlag := regexp.MustCompile(`^--admin-listen=[^:]*:(\d+)$`)
	want := map[string]bool{}
	for name, svc := range project.Services {
		bin, ok := binaryFor(svc.Image)
		if !ok || bin == "strata" {
			continue
		}
		for _, a := range svc.Command {
			if m := adminFlag.FindStringSubmatch(a); m != nil {
				want[fmt.Sprintf("%s:%s", name, m[1])] = true
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("no --admin-listen found in compose.yaml")
	}
	for tg := range want {
		if !scraped[tg] {
			t.Errorf("compose service admin port %s is not scraped", tg)
		}
	}
	for tg := range scraped {
		if !want[tg] {
			t.Errorf("scrape target %s is no compose service's admin port", tg)
		}
	}
}
