{{/* The chart's name: nameOverride, else the chart's own (the label app.kubernetes.io/name). */}}
{{- define "dispatch-k8s.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, the prefix of the objects that are the release's own (the helm
test Pod): fullnameOverride, else the release's name with the chart's name unless it holds it. */}}
{{- define "dispatch-k8s.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains (include "dispatch-k8s.name" .) .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name (include "dispatch-k8s.name" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The standard labels of every object the chart installs. */}}
{{- define "dispatch-k8s.labels" -}}
{{- $chart := printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" -}}
helm.sh/chart: {{ $chart | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "dispatch-k8s.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The controller's namespace, where the controller and the path guard's parameters go:
namespace, else the release's. */}}
{{- define "dispatch-k8s.namespace" -}}
{{- default .Release.Namespace .Values.namespace }}
{{- end }}

{{/* The steps' namespace, where their identity and templates go: steps.namespace, else the
controller's. */}}
{{- define "dispatch-k8s.stepsNamespace" -}}
{{- default (include "dispatch-k8s.namespace" .) .Values.steps.namespace }}
{{- end }}

{{/* The step image: image.repository:image.tag, the tag by default the chart's appVersion,
and @image.digest when one is set (the runtime pulls by the digest; kustomize writes the same). */}}
{{- define "dispatch-k8s.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* Whether the MutatingAdmissionPolicy goes in: policies all, or auto and the API server
serves it (admissionregistration.k8s.io/v1, Kubernetes 1.36 on). From a cluster helm lists every
kind served (v1/Namespace among them); without one (helm template, lint) only group versions, so
the Kubernetes version decides (--kube-version), or --api-versions naming the kind. Empty for
no. */}}
{{- define "dispatch-k8s.mutatingPolicy" -}}
{{- $kind := "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" }}
{{- $served := .Capabilities.APIVersions.Has $kind }}
{{- $offline := not (.Capabilities.APIVersions.Has "v1/Namespace") }}
{{- $recent := semverCompare ">=1.36.0-0" .Capabilities.KubeVersion.Version }}
{{- if eq .Values.policies "all" }}true
{{- else if and (eq .Values.policies "auto") (or $served (and $offline $recent)) }}true
{{- end }}
{{- end }}

{{/* Whether Kueue runs in policy mode (config/kueue-policy): kueue.mode policy, or auto and the
MutatingAdmissionPolicy goes in; else check mode (config/kueue). Empty for no. */}}
{{- define "dispatch-k8s.policyMode" -}}
{{- $mode := .Values.kueue.mode }}
{{- $auto := and (eq $mode "auto") (include "dispatch-k8s.mutatingPolicy" .) }}
{{- if and .Values.kueue.enabled (or (eq $mode "policy") $auto) }}true
{{- end }}
{{- end }}

{{/* Whether the controller has a PodDisruptionBudget: asked for (true), or auto and more
than one replica (at one, minAvailable 1 would block every drain). Empty for no. */}}
{{- define "dispatch-k8s.disruptionBudget" -}}
{{- $asked := toString .Values.controller.podDisruptionBudget }}
{{- $many := gt (int .Values.controller.replicas) 1 }}
{{- if or (eq $asked "true") (and (eq $asked "auto") $many) }}true
{{- end }}
{{- end }}
