package main

import (
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

// ruleFile is the Prometheus rule file format (the fields of
// github.com/prometheus/prometheus/model/rulefmt), decoded strictly; promtool
// checks the rules themselves.
type ruleFile struct {
	Groups []struct {
		Name        string            `json:"name"`
		Interval    string            `json:"interval,omitempty"`
		QueryOffset string            `json:"query_offset,omitempty"`
		Limit       int               `json:"limit,omitempty"`
		Labels      map[string]string `json:"labels,omitempty"`
		Rules       []struct {
			Record        string            `json:"record,omitempty"`
			Alert         string            `json:"alert,omitempty"`
			Expr          string            `json:"expr"`
			For           *string           `json:"for,omitempty"`
			KeepFiringFor string            `json:"keep_firing_for,omitempty"`
			Labels        map[string]string `json:"labels,omitempty"`
			Annotations   map[string]string `json:"annotations,omitempty"`
		} `json:"rules"`
	} `json:"groups"`
}

var severities = map[string]bool{"info": true, "warning": true, "critical": true}

// checkRules collects the recorded names and the metric names of every rule
// of deploy/prometheus/alerts.yml, and checks that each alert has for:, a
// severity, a summary and a runbook_url whose anchor is in docs/runbook.md.
func (v *validator) checkRules(anchors map[string]bool) {
	const rel = "deploy/prometheus/alerts.yml"
	v.recorded = map[string]bool{}
	b, ok := readFile(v.p, v.path(rel), rel)
	if !ok {
		return
	}
	var rf ruleFile
	if err := yaml.UnmarshalStrict(b, &rf); err != nil {
		v.p.add(rel, "%v", err)
		return
	}
	alerts := map[string]bool{}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				v.recorded[r.Record] = true
			}
		}
	}
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			name := r.Record
			if r.Alert != "" {
				name = r.Alert
			}
			v.useExpr(rel, "rule "+name, r.Expr)
			if r.Alert == "" {
				continue
			}
			if alerts[r.Alert] {
				v.p.add(rel, "alert %s is defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			if r.For == nil {
				v.p.add(rel, "alert %s has no for:", r.Alert)
			}
			if !severities[r.Labels["severity"]] {
				v.p.add(rel, "alert %s: severity label %q is not info, warning or critical", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				v.p.add(rel, "alert %s needs summary and description annotations", r.Alert)
			}
			url := r.Annotations["runbook_url"]
			_, anchor, found := strings.Cut(url, "docs/runbook.md#")
			switch {
			case !found:
				v.p.add(rel, "alert %s: runbook_url %q does not point at docs/runbook.md#<anchor>", r.Alert, url)
			case anchors != nil && !anchors[anchor]:
				v.p.add(rel, "alert %s: runbook_url anchor #%s is not a heading of docs/runbook.md", r.Alert, anchor)
			}
		}
	}
	if len(alerts) == 0 {
		v.p.add(rel, "defines no alert")
	}
}

var (
	headingLine   = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	explicitID    = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
	anchorDropped = regexp.MustCompile(`[^\p{L}\p{N}\s_-]`)
)

// runbookAnchors returns the anchors of docs/runbook.md as GitHub renders them
// (a heading's text lowercased, punctuation dropped, spaces turned into
// hyphens), plus explicit <a id="..."> anchors; nil if the file is missing.
func (v *validator) runbookAnchors() map[string]bool {
	b, ok := readFile(v.p, v.path("docs", "runbook.md"), "docs/runbook.md")
	if !ok {
		return nil
	}
	anchors := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		for _, m := range explicitID.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := headingLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		text := strings.ToLower(strings.ReplaceAll(m[1], "`", ""))
		text = anchorDropped.ReplaceAllString(text, "")
		anchors[strings.ReplaceAll(text, " ", "-")] = true
	}
	return anchors
}
