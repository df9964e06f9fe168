{{/*
Helpers of the ferrolb chart. The object templates beside this file are GENERATED from the
kustomize base deploy/ (`cargo run -p ferrolb-tests --bin ferrolb-helmgen`, tests/src/chart.rs);
this file, monitoring.yaml and NOTES.txt are written by hand. The chart renders no Secret: the
controller creates the speakers' membership key when it is absent (docs/membership.md).
*/}}

{{/*
The namespace of every namespaced object: namespace.name, else the release namespace. A chart that
creates its namespace (namespace.create) must name it: creating the release namespace fails under
`helm install -n NS --create-namespace` (Helm made it) and on any namespace that already exists.
*/}}
{{- define "ferrolb.namespace" -}}
{{- if and .Values.namespace.create (not .Values.namespace.name) -}}
{{- fail "namespace.create: true needs namespace.name (a namespace other than the release's, e.g. ferrolb-system with the release in default); or keep namespace.create: false and install with -n ferrolb-system --create-namespace" -}}
{{- end -}}
{{- .Values.namespace.name | default .Release.Namespace -}}
{{- end }}

{{/*
The labels on every object's metadata: the kustomize base's (deploy/kustomization.yaml `labels:`),
then Helm's standard ones. Never on selectors or pod templates (immutable, and the base keeps them
out too: includeSelectors: false).
*/}}
{{- define "ferrolb.labels" -}}
app.kubernetes.io/part-of: ferrolb
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* The one image of both workloads; the tag defaults to the chart's appVersion. */}}
{{- define "ferrolb.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion | toString) -}}
{{- end }}

{{/* The Secret holding the speakers' membership key: the user's, or the one the controller creates. */}}
{{- define "ferrolb.memberlistSecret" -}}
{{- .Values.memberlist.existingSecret | default "ferrolb-memberlist" -}}
{{- end }}
