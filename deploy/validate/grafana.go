package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	json "github.com/go-json-experiment/json/v1"
	"sigs.k8s.io/yaml"
)

// promConfig is the part of deploy/prometheus/prometheus.yml this check reads
// (promtool checks the whole file).
type promConfig struct {
	RuleFiles     []string `json:"rule_files"`
	ScrapeConfigs []struct {
		JobName      string `json:"job_name"`
		DNSSDConfigs []struct {
			Names []string `json:"names"`
			Port  int      `json:"port"`
		} `json:"dns_sd_configs"`
		StaticConfigs []struct {
			Targets []string `json:"targets"`
		} `json:"static_configs"`
	} `json:"scrape_configs"`
}

// checkPrometheusConfig checks that the podsvc job discovers every podsvc
// service of the compose file on port 8080 and that the rule files exist.
func (v *validator) checkPrometheusConfig(services []string) {
	const rel = "deploy/prometheus/prometheus.yml"
	b, ok := readFile(v.p, v.path(rel), rel)
	if !ok {
		return
	}
	var cfg promConfig
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		v.p.add(rel, "%v", err)
		return
	}
	for _, f := range cfg.RuleFiles {
		if _, err := os.Stat(v.path("deploy", "prometheus", f)); err != nil {
			v.p.add(rel, "rule file %s: %v", f, err)
		}
	}
	discovered := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName != "podsvc" {
			continue
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				if d.Port != 8080 {
					v.p.add(rel, "job podsvc: %s is scraped on port %d, podsvc listens on 8080", n, d.Port)
				}
				discovered[n] = true
			}
		}
		for _, s := range sc.StaticConfigs {
			for _, t := range s.Targets {
				discovered[strings.Split(t, ":")[0]] = true
			}
		}
	}
	for _, s := range services {
		if !discovered[s] {
			v.p.add(rel, "job podsvc does not scrape compose service %s", s)
		}
	}
}

// dashboard is the part of a Grafana dashboard JSON model this check reads.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name    string          `json:"name"`
			Type    string          `json:"type"`
			Query   json.RawMessage `json:"query"`
			Current struct {
				Value any `json:"value"`
			} `json:"current"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int             `json:"id"`
	Type        string          `json:"type"`
	Title       string          `json:"title"`
	Description string          `json:"description"`
	Datasource  json.RawMessage `json:"datasource"`
	Targets     []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

// grafanaVariable matches $name, ${name} and ${name:format} in an expression.
var grafanaVariable = regexp.MustCompile(`\$\{([a-zA-Z0-9_]+)(?::[^}]*)?\}|\$([a-zA-Z0-9_]+)`)

// grafanaDurations are Grafana's built-in variables that stand for a duration.
var grafanaDurations = map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}

// expandGrafanaVariables replaces template variables so the expression can be
// parsed as PromQL: durations become 5m, anything else (always inside a label
// matcher's quotes here) becomes a plain word.
func expandGrafanaVariables(expr string) string {
	return grafanaVariable.ReplaceAllStringFunc(expr, func(m string) string {
		sub := grafanaVariable.FindStringSubmatch(m)
		name := sub[1] + sub[2]
		if grafanaDurations[name] {
			return "5m"
		}
		return "x"
	})
}

func (v *validator) checkGrafana() {
	uids := v.datasourceUIDs()
	v.checkDashboardProvider()
	files, _ := filepath.Glob(v.path("deploy", "grafana", "dashboards", "*.json"))
	if len(files) == 0 {
		v.p.add("deploy/grafana/dashboards", "no dashboard JSON file")
	}
	dashUIDs := map[string]string{}
	for _, f := range files {
		rel := v.rel(f)
		b, ok := readFile(v.p, f, rel)
		if !ok {
			continue
		}
		var d dashboard
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&d); err != nil {
			v.p.add(rel, "not a dashboard JSON: %v", err)
			continue
		}
		v.dashboards++
		if d.UID == "" || d.Title == "" {
			v.p.add(rel, "dashboard needs a uid and a title")
		}
		if other, dup := dashUIDs[d.UID]; dup {
			v.p.add(rel, "dashboard uid %q is also used by %s", d.UID, other)
		}
		dashUIDs[d.UID] = rel
		vars := map[string]bool{}
		for _, t := range d.Templating.List {
			vars[t.Name] = true
			switch t.Type {
			case "query":
				v.checkVariableQuery(rel, t.Name, t.Query)
			case "datasource":
				// The default choice should be a provisioned datasource.
				if uid, ok := t.Current.Value.(string); ok && uid != "" && !uids[uid] {
					v.p.add(rel, "datasource variable %s defaults to %q, which is not a provisioned uid (known: %v)", t.Name, uid, sortedKeys(uids))
				}
			}
		}
		ids := map[int]bool{}
		queried := 0
		var walk func(ps []panel)
		walk = func(ps []panel) {
			for _, p := range ps {
				if ids[p.ID] {
					v.p.add(rel, "panel id %d is used twice", p.ID)
				}
				ids[p.ID] = true
				walk(p.Panels)
				if p.Type == "row" || p.Type == "text" {
					continue
				}
				queried++
				where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
				v.checkDatasource(rel, where, p.Datasource, uids, vars)
				if len(p.Targets) == 0 {
					v.p.add(rel, "%s has no targets", where)
				}
				for _, t := range p.Targets {
					tw := fmt.Sprintf("%s target %s", where, t.RefID)
					if strings.TrimSpace(t.Expr) == "" {
						v.p.add(rel, "%s has an empty expr", tw)
						continue
					}
					if len(t.Datasource) > 0 {
						v.checkDatasource(rel, tw, t.Datasource, uids, vars)
					}
					for _, m := range grafanaVariable.FindAllStringSubmatch(t.Expr, -1) {
						if n := m[1] + m[2]; !grafanaDurations[n] && !vars[n] {
							v.p.add(rel, "%s uses undefined variable $%s", tw, n)
						}
					}
					v.useExpr(rel, tw, expandGrafanaVariables(t.Expr))
					v.checkRequestTypes(rel, tw, p.Title+" "+p.Description, expandGrafanaVariables(t.Expr))
				}
			}
		}
		walk(d.Panels)
		if queried == 0 {
			v.p.add(rel, "dashboard has no panel with queries")
		}
	}
	for _, want := range []string{"POD overview", "POD pipeline lag"} {
		found := false
		for _, f := range files {
			b, _ := os.ReadFile(f)
			var d dashboard
			if json.Unmarshal(b, &d) == nil && d.Title == want {
				found = true
			}
		}
		if !found {
			v.p.add("deploy/grafana/dashboards", "no dashboard titled %q", want)
		}
	}
}

// checkVariableQuery checks the PromQL inside a label_values(...) or
// query_result(...) variable query.
func (v *validator) checkVariableQuery(rel, name string, raw json.RawMessage) {
	var q struct {
		Query string `json:"query"`
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		q.Query = s
	} else if err := json.Unmarshal(raw, &q); err != nil {
		v.p.add(rel, "variable %s: query: %v", name, err)
		return
	}
	expr := q.Query
	for _, fn := range []string{"label_values(", "query_result("} {
		if strings.HasPrefix(expr, fn) && strings.HasSuffix(expr, ")") {
			expr = strings.TrimSuffix(strings.TrimPrefix(expr, fn), ")")
			if fn == "label_values(" {
				if i := strings.LastIndex(expr, ","); i >= 0 {
					expr = expr[:i]
				}
			}
		}
	}
	if strings.TrimSpace(expr) == "" {
		v.p.add(rel, "variable %s has an empty query", name)
		return
	}
	v.useExpr(rel, "variable "+name, expandGrafanaVariables(expr))
}

// checkDatasource accepts a datasource reference to a provisioned uid or to a
// datasource variable of the dashboard.
func (v *validator) checkDatasource(rel, where string, raw json.RawMessage, uids map[string]bool, vars map[string]bool) {
	if len(raw) == 0 || string(raw) == "null" {
		v.p.add(rel, "%s has no datasource", where)
		return
	}
	var ref struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			v.p.add(rel, "%s: datasource %s is neither an object nor a name", where, raw)
			return
		}
		ref.UID = s
	}
	if ref.Type != "" && ref.Type != "prometheus" {
		v.p.add(rel, "%s: datasource type %q is not prometheus", where, ref.Type)
	}
	if m := grafanaVariable.FindStringSubmatch(ref.UID); m != nil && m[0] == ref.UID {
		if !vars[m[1]+m[2]] {
			v.p.add(rel, "%s: datasource variable %s is not defined", where, ref.UID)
		}
		return
	}
	if !uids[ref.UID] {
		v.p.add(rel, "%s: datasource uid %q is not provisioned (known: %v)", where, ref.UID, sortedKeys(uids))
	}
}

// datasourceUIDs reads the uids of the provisioned datasources, strictly.
func (v *validator) datasourceUIDs() map[string]bool {
	uids := map[string]bool{}
	files, _ := filepath.Glob(v.path("deploy", "grafana", "provisioning", "datasources", "*.yaml"))
	if len(files) == 0 {
		v.p.add("deploy/grafana/provisioning/datasources", "no datasource provisioning file")
	}
	for _, f := range files {
		rel := v.rel(f)
		b, ok := readFile(v.p, f, rel)
		if !ok {
			continue
		}
		var prov struct {
			APIVersion  int `json:"apiVersion"`
			Datasources []struct {
				Name      string         `json:"name"`
				UID       string         `json:"uid"`
				Type      string         `json:"type"`
				Access    string         `json:"access"`
				URL       string         `json:"url"`
				IsDefault bool           `json:"isDefault"`
				Editable  bool           `json:"editable"`
				JSONData  map[string]any `json:"jsonData"`
			} `json:"datasources"`
		}
		if err := yaml.UnmarshalStrict(b, &prov); err != nil {
			v.p.add(rel, "%v", err)
			continue
		}
		for _, d := range prov.Datasources {
			if d.UID == "" || d.URL == "" || d.Type != "prometheus" {
				v.p.add(rel, "datasource %q needs a uid, a url and type prometheus", d.Name)
			}
			uids[d.UID] = true
		}
	}
	return uids
}

// checkDashboardProvider checks the dashboard provider reads the folder the
// compose file mounts the dashboards at.
func (v *validator) checkDashboardProvider() {
	const rel = "deploy/grafana/provisioning/dashboards/pod.yaml"
	b, ok := readFile(v.p, v.path(rel), rel)
	if !ok {
		return
	}
	var prov struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name                  string `json:"name"`
			Folder                string `json:"folder"`
			Type                  string `json:"type"`
			DisableDeletion       bool   `json:"disableDeletion"`
			AllowUIUpdates        bool   `json:"allowUiUpdates"`
			UpdateIntervalSeconds int    `json:"updateIntervalSeconds"`
			Options               struct {
				Path                      string `json:"path"`
				FoldersFromFilesStructure bool   `json:"foldersFromFilesStructure"`
			} `json:"options"`
		} `json:"providers"`
	}
	if err := yaml.UnmarshalStrict(b, &prov); err != nil {
		v.p.add(rel, "%v", err)
		return
	}
	compose, _ := os.ReadFile(v.path("deploy", "compose", "compose.yaml"))
	for _, p := range prov.Providers {
		if p.Type != "file" || p.Options.Path == "" {
			v.p.add(rel, "provider %q must be of type file with options.path", p.Name)
			continue
		}
		if !slices.Contains(strings.Fields(string(compose)), "../grafana/dashboards:"+p.Options.Path+":ro") {
			v.p.add(rel, "provider %q reads %s, where compose.yaml does not mount deploy/grafana/dashboards", p.Name, p.Options.Path)
		}
	}
}
