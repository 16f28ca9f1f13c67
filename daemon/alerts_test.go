package daemon

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// The alerting rules shipped in contrib/prometheus name only metrics and
// labels rubickd exports, and each rule is complete.
func TestShippedAlertRules(t *testing.T) {
	b, err := os.ReadFile("../contrib/prometheus/rubick-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatal(err)
	}
	exported := exportedLabels(t, NewMetrics())
	selector := regexp.MustCompile(`\b(rubick_[a-z_]+)(\{([^}]*)\})?`)
	label := regexp.MustCompile(`([a-z_]+)\s*(=~|!=|!~|=)`)
	rules := 0
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rules++
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("group %s: rule %+v lacks a name, expression, severity, summary or description", g.Name, r)
			}
			uses := selector.FindAllStringSubmatch(r.Expr, -1)
			if len(uses) == 0 {
				t.Errorf("%s: %q names no rubick metric", r.Alert, r.Expr)
			}
			for _, u := range uses {
				labels, ok := exported[u[1]]
				if !ok {
					t.Errorf("%s: %s is not a metric rubickd exports", r.Alert, u[1])
					continue
				}
				for _, l := range label.FindAllStringSubmatch(u[3], -1) {
					if !labels[l[1]] {
						t.Errorf("%s: %s has no label %s", r.Alert, u[1], l[1])
					}
				}
			}
		}
	}
	if rules == 0 {
		t.Fatal("no rules read")
	}
}

// exportedLabels maps the name of each metric in m to its variable labels.
func exportedLabels(t *testing.T, m *Metrics) map[string]map[string]bool {
	t.Helper()
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	vars := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	out := map[string]map[string]bool{}
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok {
			continue
		}
		ch := make(chan *prometheus.Desc, 8)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			n := name.FindStringSubmatch(d.String())
			if n == nil {
				t.Fatalf("no name in %s", d)
			}
			labels := map[string]bool{}
			if l := vars.FindStringSubmatch(d.String()); l != nil {
				for _, s := range strings.Split(l[1], ",") {
					labels[strings.TrimSpace(s)] = true
				}
			}
			out[n[1]] = labels
		}
	}
	return out
}
