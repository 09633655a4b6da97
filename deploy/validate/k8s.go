package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/printpod/pod/internal/config"
	"github.com/printpod/pod/internal/metricnames"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// k8sKinds maps apiVersion/kind to a constructor of the typed object the
// manifests may contain. Anything else is reported.
var k8sKinds = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/ConfigMap":                           func() any { return &corev1.ConfigMap{} },
	"v1/Secret":                              func() any { return &corev1.Secret{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"v1/ServiceAccount":                      func() any { return &corev1.ServiceAccount{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
}

// k8sObject is one decoded manifest document.
type k8sObject struct {
	file string // relative path
	doc  int    // 1-based document number in file
	obj  any
	meta metav1.ObjectMeta
	kind string
}

func (o k8sObject) where() string {
	return fmt.Sprintf("%s %s (document %d)", o.kind, o.meta.Name, o.doc)
}

// kustomization is the part of kustomization.yaml the check reads.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// adapterConfig is the prometheus-adapter configuration format (the fields of
// sigs.k8s.io/prometheus-adapter/pkg/config), decoded strictly.
type adapterConfig struct {
	Rules         []adapterRule `json:"rules,omitempty"`
	ExternalRules []adapterRule `json:"externalRules,omitempty"`
	ResourceRules *struct {
		CPU    map[string]any `json:"cpu,omitempty"`
		Memory map[string]any `json:"memory,omitempty"`
		Window string         `json:"window,omitempty"`
	} `json:"resourceRules,omitempty"`
}

type adapterRule struct {
	SeriesQuery   string `json:"seriesQuery"`
	SeriesFilters []struct {
		Is    string `json:"is,omitempty"`
		IsNot string `json:"isNot,omitempty"`
	} `json:"seriesFilters,omitempty"`
	Resources struct {
		Template  string `json:"template,omitempty"`
		Overrides map[string]struct {
			Group    string `json:"group,omitempty"`
			Resource string `json:"resource"`
		} `json:"overrides,omitempty"`
		Namespaced *bool `json:"namespaced,omitempty"`
	} `json:"resources"`
	Name *struct {
		Matches string `json:"matches"`
		As      string `json:"as,omitempty"`
	} `json:"name,omitempty"`
	MetricsQuery string `json:"metricsQuery"`
}

func (v *validator) checkK8s() {
	dir := v.path("deploy", "k8s")
	entries, err := os.ReadDir(dir)
	if err != nil {
		v.p.add("deploy/k8s", "%v", err)
		return
	}
	var files []string
	for _, e := range entries {
		n := e.Name()
		if !e.IsDir() && (strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) && n != "kustomization.yaml" {
			files = append(files, n)
		}
	}
	v.checkKustomization(dir, files)

	var objs []k8sObject
	for _, f := range files {
		objs = append(objs, v.decodeManifests(filepath.Join(dir, f))...)
	}
	v.k8sObjects = len(objs)
	v.checkK8sObjects(objs)
}

func (v *validator) checkKustomization(dir string, files []string) {
	const rel = "deploy/k8s/kustomization.yaml"
	b, ok := readFile(v.p, filepath.Join(dir, "kustomization.yaml"), rel)
	if !ok {
		return
	}
	var k kustomization
	if err := yaml.Unmarshal(b, &k); err != nil {
		v.p.add(rel, "%v", err)
		return
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		v.p.add(rel, "apiVersion/kind %s/%s is not kustomize.config.k8s.io/v1beta1/Kustomization", k.APIVersion, k.Kind)
	}
	listed := map[string]bool{}
	for _, r := range k.Resources {
		if listed[r] {
			v.p.add(rel, "resource %s is listed twice", r)
		}
		listed[r] = true
		if !slices.Contains(files, r) {
			v.p.add(rel, "resource %s is not a manifest file of deploy/k8s", r)
		}
	}
	for _, f := range files {
		if !listed[f] {
			v.p.add(rel, "manifest %s is not listed in resources", f)
		}
	}
}

// decodeManifests splits a file into documents and decodes each strictly into
// its Kubernetes type: unknown or misspelled fields, wrong value types and
// duplicate keys are errors.
func (v *validator) decodeManifests(path string) []k8sObject {
	rel := v.rel(path)
	b, ok := readFile(v.p, path, rel)
	if !ok {
		return nil
	}
	var objs []k8sObject
	r := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for doc := 1; ; doc++ {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			v.p.add(rel, "document %d: %v", doc, err)
			break
		}
		if len(bytes.TrimSpace(stripComments(raw))) == 0 {
			doc--
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &tm); err != nil {
			v.p.add(rel, "document %d: %v", doc, err)
			continue
		}
		gvk := tm.APIVersion + "/" + tm.Kind
		mk, known := k8sKinds[gvk]
		if !known {
			v.p.add(rel, "document %d: unsupported apiVersion/kind %q", doc, gvk)
			continue
		}
		obj := mk()
		if err := yaml.UnmarshalStrict(raw, obj); err != nil {
			v.p.add(rel, "document %d (%s): %v", doc, tm.Kind, err)
			continue
		}
		o := k8sObject{file: rel, doc: doc, obj: obj, kind: tm.Kind, meta: objectMeta(obj)}
		for _, e := range validation.IsDNS1123Subdomain(o.meta.Name) {
			v.p.add(rel, "document %d: metadata.name %q: %s", doc, o.meta.Name, e)
		}
		if tm.Kind != "Namespace" && o.meta.Namespace == "" {
			v.p.add(rel, "document %d: %s %s has no metadata.namespace", doc, tm.Kind, o.meta.Name)
		}
		for _, e := range metav1validation.ValidateLabels(o.meta.Labels, field.NewPath("metadata", "labels")) {
			v.p.add(rel, "document %d: %v", doc, e)
		}
		objs = append(objs, o)
	}
	return objs
}

func stripComments(b []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(b, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

func objectMeta(obj any) metav1.ObjectMeta {
	if m, ok := obj.(interface{ GetObjectMeta() metav1.Object }); ok {
		om := m.GetObjectMeta()
		return metav1.ObjectMeta{Name: om.GetName(), Namespace: om.GetNamespace(), Labels: om.GetLabels()}
	}
	return metav1.ObjectMeta{}
}

func (v *validator) checkK8sObjects(objs []k8sObject) {
	byKind := map[string]map[string]k8sObject{} // kind -> namespace/name -> object
	for _, o := range objs {
		if byKind[o.kind] == nil {
			byKind[o.kind] = map[string]k8sObject{}
		}
		key := o.meta.Namespace + "/" + o.meta.Name
		if _, dup := byKind[o.kind][key]; dup {
			v.p.add(o.file, "%s %s is defined twice", o.kind, key)
		}
		byKind[o.kind][key] = o
	}
	namespaces := byKind["Namespace"]
	for _, kind := range sortedKeys(byKind) {
		for _, key := range sortedKeys(byKind[kind]) {
			o := byKind[kind][key]
			// The adapter's rules live in the monitoring namespace, which the
			// adapter's own installation creates.
			if ns := o.meta.Namespace; ns != "" && ns != "monitoring" && namespaces["/"+ns].obj == nil {
				v.p.add(o.file, "%s: namespace %q is not defined in deploy/k8s", o.where(), ns)
			}
		}
	}

	deployments := map[string]*appsv1.Deployment{}
	for _, key := range sortedKeys(byKind["Deployment"]) {
		o := byKind["Deployment"][key]
		d := o.obj.(*appsv1.Deployment)
		deployments[key] = d
		v.checkDeployment(o, d, byKind)
	}
	var roles []string
	for _, d := range deployments {
		roles = append(roles, envValue(d.Spec.Template.Spec.Containers, "POD_ROLES"))
	}
	for _, r := range config.AllRoles {
		if !slices.Contains(roles, r) {
			v.p.add("deploy/k8s", "no Deployment runs role %q", r)
		}
	}

	for _, key := range sortedKeys(byKind["Service"]) {
		o := byKind["Service"][key]
		s := o.obj.(*corev1.Service)
		if len(s.Spec.Selector) == 0 {
			v.p.add(o.file, "%s: no selector", o.where())
			continue
		}
		d := matchingDeployment(deployments, o.meta.Namespace, labels.SelectorFromSet(s.Spec.Selector))
		if d == nil {
			v.p.add(o.file, "%s: selector %v matches no Deployment", o.where(), s.Spec.Selector)
			continue
		}
		for _, port := range s.Spec.Ports {
			if port.TargetPort.StrVal != "" && !hasPort(d, port.TargetPort.StrVal) {
				v.p.add(o.file, "%s: targetPort %q is not a container port of %s", o.where(), port.TargetPort.StrVal, d.Name)
			}
		}
	}

	for _, key := range sortedKeys(byKind["PodDisruptionBudget"]) {
		o := byKind["PodDisruptionBudget"][key]
		pdb := o.obj.(*policyv1.PodDisruptionBudget)
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || pdb.Spec.Selector == nil {
			v.p.add(o.file, "%s: bad selector: %v", o.where(), err)
			continue
		}
		if (pdb.Spec.MinAvailable == nil) == (pdb.Spec.MaxUnavailable == nil) {
			v.p.add(o.file, "%s: set exactly one of minAvailable and maxUnavailable", o.where())
		}
		if matchingDeployment(deployments, o.meta.Namespace, sel) == nil {
			v.p.add(o.file, "%s: selector matches no Deployment", o.where())
		}
	}

	adapterMetrics := v.checkAdapter(byKind["ConfigMap"])
	scaled := map[string]bool{}
	for _, key := range sortedKeys(byKind["HorizontalPodAutoscaler"]) {
		o := byKind["HorizontalPodAutoscaler"][key]
		v.checkHPA(o, o.obj.(*autoscalingv2.HorizontalPodAutoscaler), deployments, adapterMetrics, scaled)
	}
	for key, d := range deployments {
		if scaled[key] && d.Spec.Replicas != nil {
			v.p.add("deploy/k8s", "Deployment %s sets spec.replicas although an HPA scales it (each apply would reset the count)", key)
		}
	}
}

func matchingDeployment(ds map[string]*appsv1.Deployment, ns string, sel labels.Selector) *appsv1.Deployment {
	for _, key := range sortedKeys(ds) {
		d := ds[key]
		if d.Namespace == ns && sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			return d
		}
	}
	return nil
}

func hasPort(d *appsv1.Deployment, name string) bool {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return true
			}
		}
	}
	return false
}

func envValue(cs []corev1.Container, name string) string {
	for _, c := range cs {
		for _, e := range c.Env {
			if e.Name == name {
				return e.Value
			}
		}
	}
	return ""
}

func (v *validator) checkDeployment(o k8sObject, d *appsv1.Deployment, byKind map[string]map[string]k8sObject) {
	bad := func(format string, args ...any) { v.p.add(o.file, "%s: %s", o.where(), fmt.Sprintf(format, args...)) }
	spec := d.Spec.Template.Spec
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	switch {
	case d.Spec.Selector == nil || err != nil:
		bad("bad or missing selector: %v", err)
	case !sel.Matches(labels.Set(d.Spec.Template.Labels)):
		bad("selector does not match the pod template's labels")
	}
	for _, e := range metav1validation.ValidateLabelSelector(d.Spec.Selector, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("spec", "selector")) {
		bad("%v", e)
	}
	ann := d.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] == "" {
		bad("pod template needs prometheus.io/scrape and prometheus.io/port annotations")
	}
	if len(spec.Containers) == 0 {
		bad("no container")
	}
	volumes := map[string]bool{}
	for _, vol := range spec.Volumes {
		volumes[vol.Name] = true
	}
	for _, c := range spec.Containers {
		cw := "container " + c.Name
		if c.Image == "" {
			bad("%s: no image", cw)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		checkProbe := func(kind string, p *corev1.Probe, path string) {
			switch {
			case p == nil:
				bad("%s: no %s", cw, kind)
			case p.HTTPGet == nil:
				bad("%s: %s is not an httpGet probe", cw, kind)
			case p.HTTPGet.Path != path:
				bad("%s: %s path is %q, want %q", cw, kind, p.HTTPGet.Path, path)
			case p.HTTPGet.Port.StrVal != "" && ports[p.HTTPGet.Port.StrVal] == 0:
				bad("%s: %s port %q is not a container port", cw, kind, p.HTTPGet.Port.StrVal)
			}
		}
		checkProbe("readinessProbe", c.ReadinessProbe, "/readyz")
		checkProbe("livenessProbe", c.LivenessProbe, "/healthz")
		for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[res]
			lim, hasLim := c.Resources.Limits[res]
			if !hasReq || !hasLim {
				bad("%s: needs both a request and a limit for %s", cw, res)
			} else if req.Cmp(lim) > 0 {
				bad("%s: %s request %s is above its limit %s", cw, res, req.String(), lim.String())
			}
		}
		for _, m := range c.VolumeMounts {
			if !volumes[m.Name] {
				bad("%s: volume mount %q names no volume", cw, m.Name)
			}
		}
		if ann["prometheus.io/port"] != "" && !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return fmt.Sprint(p.ContainerPort) == ann["prometheus.io/port"]
		}) {
			bad("%s: prometheus.io/port %s is not a container port", cw, ann["prometheus.io/port"])
		}

		// The environment podsvc would see: envFrom sources, then env.
		env := map[string]string{}
		for _, src := range c.EnvFrom {
			switch {
			case src.ConfigMapRef != nil:
				cm, ok := byKind["ConfigMap"][o.meta.Namespace+"/"+src.ConfigMapRef.Name]
				if !ok {
					bad("%s: envFrom ConfigMap %q is not defined", cw, src.ConfigMapRef.Name)
					continue
				}
				for k, val := range cm.obj.(*corev1.ConfigMap).Data {
					env[src.Prefix+k] = val
				}
			case src.SecretRef != nil:
				s, ok := byKind["Secret"][o.meta.Namespace+"/"+src.SecretRef.Name]
				if !ok {
					bad("%s: envFrom Secret %q is not defined", cw, src.SecretRef.Name)
					continue
				}
				sec := s.obj.(*corev1.Secret)
				for k, val := range sec.StringData {
					env[src.Prefix+k] = val
				}
				for k, val := range sec.Data {
					env[src.Prefix+k] = string(val)
				}
			}
		}
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
		role := env["POD_ROLES"]
		if role == "" || !slices.Contains(config.AllRoles, role) {
			bad("%s: POD_ROLES %q is not one role of %v", cw, role, config.AllRoles)
		}
		if want := fmt.Sprintf("podsvc-%s", role); d.Name != want {
			bad("runs role %q, so it should be named %s", role, want)
		}
		if env["POD_ENV"] != "production" {
			bad("%s: POD_ENV is %q, want production", cw, env["POD_ENV"])
		}
		if h := env["POD_HTTP_ADDR"]; !strings.HasPrefix(h, "0.0.0.0:") || !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool {
			return strings.HasSuffix(h, fmt.Sprintf(":%d", p.ContainerPort))
		}) {
			bad("%s: POD_HTTP_ADDR %q must listen on 0.0.0.0 at a container port", cw, h)
		}
		if n := len(strings.Split(env["KAFKA_BROKERS"], ",")); n < 3 || env["KAFKA_BROKERS"] == "" {
			bad("%s: KAFKA_BROKERS names %d brokers, want 3", cw, n)
		}
		v.checkPodsvcConfig(o.file, o.where()+": "+cw, env)
	}
}

// placeholderValues stand in for CHANGE_ME placeholders when podsvc's own
// configuration check runs over a manifest's settings.
var placeholderValues = map[string]string{
	"POD_WEBHOOK_SECRET_KEY": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", // 32 zero bytes
}

// checkPodsvcConfig runs podsvc's configuration loader over env, so a setting
// podsvc would refuse at start fails here.
func (v *validator) checkPodsvcConfig(file, where string, env map[string]string) {
	getenv := func(k string) string {
		val := env[k]
		if isPlaceholder(val) {
			if s, ok := placeholderValues[k]; ok {
				return s
			}
		}
		return val
	}
	for k := range env {
		if strings.HasPrefix(k, "POD_") && !knownSetting(k) {
			v.p.add(file, "%s: %s is not a podsvc setting", where, k)
		}
	}
	if _, err := config.FromEnv(getenv); err != nil {
		v.p.add(file, "%s: podsvc would refuse this configuration: %s", where, strings.ReplaceAll(err.Error(), "\n", "; "))
	}
}

// knownSetting reports whether podsvc reads environment variable k: its name
// appears in internal/config (the loader names every variable it reads).
func knownSetting(k string) bool { return settingNames[k] }

var settingNames = func() map[string]bool {
	names := map[string]bool{}
	// Probe the loader: every variable it asks for is a setting.
	_, _ = config.FromEnv(func(k string) string { names[k] = true; return "" })
	return names
}()

func (v *validator) checkHPA(o k8sObject, h *autoscalingv2.HorizontalPodAutoscaler, deployments map[string]*appsv1.Deployment,
	adapterMetrics map[string]bool, scaled map[string]bool) {
	bad := func(format string, args ...any) { v.p.add(o.file, "%s: %s", o.where(), fmt.Sprintf(format, args...)) }
	ref := h.Spec.ScaleTargetRef
	key := o.meta.Namespace + "/" + ref.Name
	if ref.Kind != "Deployment" || ref.APIVersion != "apps/v1" || deployments[key] == nil {
		bad("scaleTargetRef %s %s/%s is not a Deployment of deploy/k8s", ref.APIVersion, ref.Kind, ref.Name)
	} else {
		scaled[key] = true
	}
	if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || *h.Spec.MinReplicas > h.Spec.MaxReplicas {
		bad("needs 1 <= minReplicas <= maxReplicas")
	}
	if len(h.Spec.Metrics) == 0 {
		bad("no metrics")
	}
	for i, m := range h.Spec.Metrics {
		switch m.Type {
		case autoscalingv2.ExternalMetricSourceType:
			if m.External == nil {
				bad("metrics[%d]: type External without external", i)
				continue
			}
			if !adapterMetrics[m.External.Metric.Name] {
				bad("metrics[%d]: external metric %q is not served by the prometheus-adapter rules", i, m.External.Metric.Name)
			}
			if sel := m.External.Metric.Selector; sel != nil {
				for _, e := range metav1validation.ValidateLabelSelector(sel, metav1validation.LabelSelectorValidationOptions{}, field.NewPath("selector")) {
					bad("metrics[%d]: %v", i, e)
				}
			}
			t := m.External.Target
			if (t.Type == autoscalingv2.AverageValueMetricType && t.AverageValue == nil) || (t.Type == autoscalingv2.ValueMetricType && t.Value == nil) {
				bad("metrics[%d]: target %s has no value", i, t.Type)
			}
		case autoscalingv2.PodsMetricSourceType:
			if m.Pods == nil || !adapterMetrics[m.Pods.Metric.Name] {
				bad("metrics[%d]: pods metric is not served by the prometheus-adapter rules", i)
			}
		case autoscalingv2.ResourceMetricSourceType:
			if m.Resource == nil {
				bad("metrics[%d]: type Resource without resource", i)
			}
		default:
			bad("metrics[%d]: unexpected metric type %q", i, m.Type)
		}
	}
}

// checkAdapter reads the prometheus-adapter rules (ConfigMap
// monitoring/prometheus-adapter, key config.yaml) strictly and returns the
// metric names they serve.
func (v *validator) checkAdapter(configMaps map[string]k8sObject) map[string]bool {
	served := map[string]bool{}
	o, ok := configMaps["monitoring/prometheus-adapter"]
	if !ok {
		v.p.add("deploy/k8s", "no ConfigMap monitoring/prometheus-adapter with the adapter's rules")
		return served
	}
	data := o.obj.(*corev1.ConfigMap).Data["config.yaml"]
	var cfg adapterConfig
	if err := yaml.UnmarshalStrict([]byte(data), &cfg); err != nil {
		v.p.add(o.file, "%s: config.yaml: %v", o.where(), err)
		return served
	}
	for i, r := range append(slices.Clone(cfg.Rules), cfg.ExternalRules...) {
		where := fmt.Sprintf("adapter rule %d", i)
		v.useExpr(o.file, where+" seriesQuery", r.SeriesQuery)
		names, _ := metricnames.InExpr(r.SeriesQuery)
		if !strings.Contains(r.MetricsQuery, "<<.Series>>") || !strings.Contains(r.MetricsQuery, "<<.LabelMatchers>>") {
			v.p.add(o.file, "%s: metricsQuery must use <<.Series>> and <<.LabelMatchers>>", where)
		}
		series := "m"
		if len(names) > 0 {
			series = names[0]
		}
		q := strings.NewReplacer("<<.Series>>", series, "<<.LabelMatchers>>", `l="x"`, "<<.GroupBy>>", "l").Replace(r.MetricsQuery)
		if _, err := metricnames.InExpr(q); err != nil {
			v.p.add(o.file, "%s: metricsQuery is not valid PromQL: %v", where, err)
		}
		for _, n := range names {
			if r.Name != nil && r.Name.As != "" {
				served[r.Name.As] = true
			} else {
				served[n] = true
			}
		}
	}
	return served
}
