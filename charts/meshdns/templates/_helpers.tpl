{{/*
Names are fixed, not prefixed with the release: CoreDNS forwards to the Service meshdns, and the
sidecars of k8s/components/sidecar mount meshdns-clusters and meshdns-local by name. One release
per namespace.
*/}}

{{/* Labels every object of the chart carries (with its app.kubernetes.io/name). */}}
{{- define "meshdns.labels" -}}
app.kubernetes.io/name: meshdns
{{ include "meshdns.releaseLabels" . }}
{{- end }}

{{- define "meshdns.releaseLabels" -}}
app.kubernetes.io/part-of: meshdns
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/* The resolver's selector: the same as k8s/components/resolver's (selectors are immutable). */}}
{{- define "meshdns.resolverSelector" -}}
app.kubernetes.io/name: meshdns
app.kubernetes.io/component: resolver
{{- end }}

{{- define "meshdns.resolverLabels" -}}
{{ include "meshdns.labels" . }}
app.kubernetes.io/component: resolver
{{- end }}

{{/* The release image: one place. */}}
{{- define "meshdns.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* MESHDNS_CLUSTERS from config.mesh.clusters: NAME=EP,EP opt=val ...; entries joined by "; ". */}}
{{- define "meshdns.clusters" -}}
{{- $entries := list -}}
{{- range .Values.config.mesh.clusters -}}
{{- $fields := list (printf "%s=%s" .name (join "," (.endpoints | default list))) -}}
{{- range $key, $value := (.options | default dict) -}}
{{- $fields = append $fields (printf "%s=%s" $key (kindIs "slice" $value | ternary (join "," $value) (toString $value))) -}}
{{- end -}}
{{- $entries = append $entries (join " " $fields) -}}
{{- end -}}
{{- join "; " $entries -}}
{{- end }}

{{/* KEY: value lines of a ConfigMap's data, for the settings that are set (empty: meshdns's default). */}}
{{- define "meshdns.settings" -}}
{{- range $name, $value := . }}
{{- if kindIs "slice" $value }}{{ $value = join "," $value }}{{ end }}
{{- if kindIs "float64" $value }}{{ $value = int64 $value }}{{ end }}
{{- if ne (toString $value) "" }}
{{ $name }}: {{ toString $value | quote }}
{{- end }}
{{- end }}
{{- end }}

{{/* The webhook's labels: its own app.kubernetes.io/name (the selectors of k8s/webhook). */}}
{{- define "meshdns.webhookLabels" -}}
app.kubernetes.io/name: meshdns-webhook
{{ include "meshdns.releaseLabels" . }}
{{- end }}
