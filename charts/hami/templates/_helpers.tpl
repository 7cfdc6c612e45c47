{{/* The release's full name: "hami" for the release hami (the guides' names). */}}
{{- define "hami.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hami.scheduler" -}}{{ include "hami.fullname" . }}-scheduler{{- end -}}
{{- define "hami.devicePlugin" -}}{{ include "hami.fullname" . }}-device-plugin{{- end -}}
{{- define "hami.monitor" -}}{{ include "hami.fullname" . }}-vgpu-monitor{{- end -}}

{{- define "hami.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "hami.labels" -}}
app.kubernetes.io/name: {{ default .Chart.Name .Values.nameOverride }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/part-of: hami
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- with .Values.global.labels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Selector labels of one component; call with (dict "ctx" $ "app" "hami-scheduler"). `app` is what the
guides select on, app.kubernetes.io/component what HAMi's code selects on (the role labels).
*/}}
{{- define "hami.componentLabels" -}}
app: {{ .app }}
app.kubernetes.io/component: {{ .app }}
{{- end -}}

{{- define "hami.selectorLabels" -}}
{{ include "hami.componentLabels" . }}
app.kubernetes.io/name: {{ default .ctx.Chart.Name .ctx.Values.nameOverride }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
{{- end -}}

{{/* Pod template labels. */}}
{{- define "hami.podLabels" -}}
{{ include "hami.selectorLabels" . }}
app.kubernetes.io/part-of: hami
{{- end -}}

{{/* (hami-py) --enable-tracing and its environment, for each daemon's container (values.tracing). */}}
{{- define "hami.tracingArgs" -}}
{{- if .Values.tracing.enabled }}
- --enable-tracing
{{- end }}
{{- end -}}

{{- define "hami.tracingEnv" -}}
{{- if .Values.tracing.enabled }}
{{- with .Values.tracing.endpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
- name: OTEL_TRACES_SAMPLER
  value: {{ .Values.tracing.sampler | quote }}
- name: OTEL_TRACES_SAMPLER_ARG
  value: {{ .Values.tracing.ratio | quote }}
- name: HAMI_TRACE_KEY
  valueFrom:
    secretKeyRef:
      name: {{ .Values.tracing.keySecret | default (printf "%s-trace-key" (include "hami.fullname" .)) }}
      key: key
{{- end }}
{{- end -}}
