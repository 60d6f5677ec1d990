{{/* The step image: image.repository:image.tag, the tag by default the chart's appVersion. */}}
{{- define "dispatch-k8s.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
