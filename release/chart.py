"""The Helm chart charts/dispatch-k8s, generated from config/'s overlays by the real kustomize.

Nothing in the chart is written by hand: `python -m release.chart --kustomize PATH`
(scripts/render-dist) renders each overlay, files every object under the choice that brings it
(the objects of config/plain and config/policies-guard-only in every install; what config/kueue
adds over plain under `kueue.enabled`, and so on), and puts the values in where the overlays name
the image, the AdmissionCheck, the replicas, the resources and the controllers the path guard
trusts.
tests/unit/test_chart.py fails when the checked-in chart differs from this, and checks
`helm template` against the kustomize render of the matching choices (tests/support/tools.py runs
helm).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from release import dist
from release.dist import Key
from release.project import REPO, Manifest, default_image, version

CHART: Final = REPO / "charts" / "dispatch-k8s"
HEADER: Final = "# Generated from config/ by scripts/render-dist: do not edit (README, Install).\n"
# Template file -> the condition its objects are rendered under, and the overlays that decide
# which objects it holds: those of `with_them` that `without` lacks.
Choice = tuple[str, str, str]
CHOICES: Final[dict[str, Choice]] = {
    "kueue.yaml": (".Values.kueue.enabled", "kueue", "plain"),
    "policy-mode.yaml": ('include "dispatch-k8s.policyMode" .', "kueue-policy", "kueue"),
    "raise-on-open.yaml": (
        'include "dispatch-k8s.mutatingPolicy" .',
        "kueue",
        "policies-guard-only",
    ),
    "monitoring.yaml": (".Values.monitoring.enabled", "monitoring", "kueue"),
    "argo.yaml": (".Values.argo.enabled", "argo", "kueue"),
    "tekton.yaml": (".Values.tekton.enabled", "tekton", "kueue"),
}
BASE: Final = "base.yaml"  # everything in every install
# Sentinels put where a value goes, swapped for its template text once the YAML is written.
IMAGE: Final = "__DISPATCH_IMAGE__"
CHECK_NAME: Final = "__DISPATCH_CHECK__"
REPLICAS: Final = "__DISPATCH_REPLICAS__"
RESOURCES: Final = "__DISPATCH_RESOURCES__"
NAMESPACES: Final = "__DISPATCH_NAMESPACES__"
ON_REFUSAL: Final = "__DISPATCH_ON_REFUSAL__"
LOG_LEVEL: Final = "__DISPATCH_LOG_LEVEL__"
IDENTITIES: Final = "__DISPATCH_CONTROLLER_IDENTITIES__"
NAMESPACE: Final = "__DISPATCH_NAMESPACE__"
STEPS_NAMESPACE: Final = "__DISPATCH_STEPS_NAMESPACE__"
LABELS: Final = "__DISPATCH_LABELS__"
POD_LABELS: Final = "__DISPATCH_POD_LABELS__"
EXTRA_ARGS: Final = "__DISPATCH_EXTRA_ARGS__"
EXTRA_ENV: Final = "__DISPATCH_EXTRA_ENV__"
GATE: Final = "__DISPATCH_GATE__"
# Keys written only when their value is set: sentinel -> (the key, the value, a scalar).
OPTIONAL: Final = {
    "__DISPATCH_POD_ANNOTATIONS__": ("annotations", ".Values.podAnnotations", False),
    "__DISPATCH_AFFINITY__": ("affinity", ".Values.affinity", False),
    "__DISPATCH_NODE_SELECTOR__": ("nodeSelector", ".Values.nodeSelector", False),
    "__DISPATCH_TOLERATIONS__": ("tolerations", ".Values.tolerations", False),
    "__DISPATCH_SPREAD__": (
        "topologySpreadConstraints",
        ".Values.topologySpreadConstraints",
        False,
    ),
    "__DISPATCH_PRIORITY__": ("priorityClassName", ".Values.priorityClassName", True),
    "__DISPATCH_PULL_SECRETS__": ("imagePullSecrets", ".Values.imagePullSecrets", False),
    "__DISPATCH_PULL_POLICY__": ("imagePullPolicy", ".Values.image.pullPolicy", True),
}
# The labels every object gets from the chart (templates/_helpers.tpl), over config/'s own.
STANDARD_LABELS: Final = (
    "helm.sh/chart",
    "app.kubernetes.io/name",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
)
# The values that install as config/ does, released in `default`: the controller in the
# Namespace dispatch-system, which the chart makes, the steps in `default`.
CONFIG_LAYOUT: Final = [
    "namespace=dispatch-system",
    "createNamespace=true",
    "steps.namespace=default",
]
# Objects rendered only under a condition of their own, by kind.
WHEN: Final = {
    "Namespace": ".Values.createNamespace",
    "PodDisruptionBudget": 'include "dispatch-k8s.disruptionBudget" .',
    # Policy mode has no AdmissionCheck (config/components/policy-mode).
    "AdmissionCheck": 'not (include "dispatch-k8s.policyMode" .)',
}
# The path guard's parameters (pipelines/policies/controllers.yaml): who each controller is.
CONTROLLERS: Final = ("v1", "ConfigMap", "dispatch-system", "dispatch-k8s-controllers")

HELPERS: Final = """\
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
"""
# The metrics are the controller's: without it the Service would select no pod.
MONITORING_NEEDS_KUEUE: Final = """\
{{- if and .Values.monitoring.enabled (not .Values.kueue.enabled) }}
{{- fail "monitoring.enabled needs kueue.enabled: the metrics are the controller's" }}
{{- end }}
"""
# Policy mode is the raise on open: without the MutatingAdmissionPolicy no admission raises A.
POLICY_MODE_NEEDS_MAP: Final = """\
{{- if include "dispatch-k8s.policyMode" . }}
{{- if not (include "dispatch-k8s.mutatingPolicy" .) }}
{{- fail "kueue.mode=policy needs the MutatingAdmissionPolicy (policies: all, or auto on 1.36+)" }}
{{- end }}
{{- end }}
"""

VALUES: Final = """\
# dispatch-k8s's chart: the objects of config/'s overlays (README, Install), chosen by these
# values. The defaults install what config/kueue-policy (dist/install-kueue-policy.yaml) does
# where the API server serves MutatingAdmissionPolicy, else config/policies-guard-only, in the
# release's namespace.
# Generated from config/ by scripts/render-dist: do not edit; set values with --set or -f.

# The label app.kubernetes.io/name (default: the chart's name), and the prefix of the objects
# that are the release's own (the helm test Pod; default: the release's name and the chart's).
nameOverride: ""
fullnameOverride: ""

# Where the controller and the path guard's parameters go: empty is the release's namespace
# (helm's -n). createNamespace: the chart makes that Namespace (restricted Pod Security), for a
# namespace other than the release's; helm install --create-namespace makes the release's.
namespace: ""
createNamespace: false

# The steps' identity (the ServiceAccount dispatch-steps and its RBAC) and, with Argo or Tekton,
# the step templates: in the namespace where the TrainJobs live. Empty is the namespace above.
steps:
  namespace: ""

# The step image: the controller's container, and the Argo and Tekton parameters that default
# to it. An empty tag is the chart's appVersion; a digest (sha256:...) pins it (repository:
# tag@digest: the runtime pulls by the digest).
image:
  repository: {repository}
  tag: ""
  digest: ""
  # The controller's imagePullPolicy: empty is Kubernetes' default (IfNotPresent for a tag).
  pullPolicy: ""

# Secrets to pull the image with (of the controller's namespace), as [{{name: ...}}].
imagePullSecrets: []

# Where the controller's pods run, as a pod's spec says it (nodeSelector, tolerations and
# priorityClassName also for the helm test Pod). The default affinity spreads the controller's
# replicas over nodes; {{}} drops it.
affinity:
{affinity}nodeSelector: {{}}
tolerations: []
topologySpreadConstraints: []
priorityClassName: ""
# More annotations and labels of the controller's pods.
podAnnotations: {{}}
podLabels: {{}}

# Kueue mode: the controller, and in check mode the AdmissionCheck it gates (config/kueue).
# false is plain mode, neither (config/plain, dist/install.yaml).
kueue:
  enabled: true
  # policy: no AdmissionCheck; the MutatingAdmissionPolicy raises A in Kueue's own opening,
  # at plain Kueue's cost, and the controller only audits (config/kueue-policy, Kubernetes
  # 1.36+). check: every admission waits for the AdmissionCheck, which the controller gates
  # (2.3-2.9x plain Kueue's time to admit; any Kubernetes from 1.30). auto: policy where the
  # MutatingAdmissionPolicy goes in (policies above), else check (docs/install.md).
  mode: auto
  # The AdmissionCheck's name, as your ClusterQueues list it in check mode; also the default
  # check of the Argo and Tekton steps.
  admissionCheck: {check}

# The controller's Deployment (pipelines/controller/20-deployment.yaml).
controller:
  replicas: {replicas}
  # Gate the Workloads and audit the TrainJobs of these namespaces only (its --namespaces);
  # empty: every namespace.
  namespaces: []
  # What a refused Workload's check is set to (its --on-refusal): reject (Kueue deactivates
  # the Workload and frees its quota), retry (evicted, requeued after a delay doubling from a
  # minute, Rejected after three retries: --backoff-* in extraArgs), or wait (Pending, the
  # quota held until a person acts).
  onRefusal: reject
  # How much the controller logs (its --log-level): debug, info, warning or error.
  logLevel: info
  # More of its flags (dispatch-admission-controller --help), and environment variables, as
  # a container's env.
  extraArgs: []
  extraEnv: []
  resources:
{resources}
  # A PodDisruptionBudget (minAvailable 1): auto has one when replicas > 1 (at one replica it
  # would block every node drain); true or false to say.
  podDisruptionBudget: auto

# Who the path guard trusts to write what it guards (the ConfigMap dispatch-k8s-controllers,
# docs/policies.md): the usernames each controller writes as. The defaults are the upstream
# installs' ServiceAccounts; name yours where they run as other users. Whoever may set these
# may name themselves a controller: give that right only to whoever may edit the policies.
controllerIdentities:
{identities}
# all: every policy of pipelines/policies. guard-only: without the MutatingAdmissionPolicy,
# for Kubernetes 1.30 to 1.35 (config/policies-guard-only). auto: all where the API server
# serves MutatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.36 on), else
# guard-only; helm template without a cluster decides from --kube-version.
policies: auto

# The controller's Service, ServiceMonitor and PrometheusRule (config/monitoring): needs
# prometheus-operator's CRDs, and kueue.enabled.
monitoring:
  enabled: false

# The steps as Argo WorkflowTemplates, with Argo's executor grant (config/argo).
argo:
  enabled: false

# The steps as Tekton Tasks and Pipelines (config/tekton).
tekton:
  enabled: false
"""

# What helm prints after an install or upgrade.
NOTES: Final = """\
dispatch-k8s {{ .Chart.AppVersion }} is installed:
release {{ .Release.Name }} in {{ .Release.Namespace }}.
{{- $namespace := include "dispatch-k8s.namespace" . }}
{{- $steps := include "dispatch-k8s.stepsNamespace" . }}

- The steps' identity: the ServiceAccount @STEPS_ACCOUNT@ in {{ $steps }}, and the
  dispatch-ready ClusterTrainingRuntimes.
{{- if include "dispatch-k8s.mutatingPolicy" . }}
- Every policy of pipelines/policies, the MutatingAdmissionPolicy included.
{{- else }}
- The guard-only policies: this API server does not serve MutatingAdmissionPolicy
  (admissionregistration.k8s.io/v1, Kubernetes 1.36), or policies=guard-only was set.
{{- end }}
{{- if include "dispatch-k8s.policyMode" . }}
- Kueue's policy mode: no AdmissionCheck (the MutatingAdmissionPolicy raises A as Kueue
  opens a TrainJob), and the controller as the auditor only (the Deployment
  dispatch-admission-controller in {{ $namespace }}, replicas: {{ .Values.controller.replicas }}).
{{- else if .Values.kueue.enabled }}
- Kueue's check mode: the AdmissionCheck {{ .Values.kueue.admissionCheck }}, and its controller
  (the Deployment dispatch-admission-controller in {{ $namespace }},
  replicas: {{ .Values.controller.replicas }}).
{{- else }}
- Plain mode: no AdmissionCheck, no controller.
{{- end }}

Check the install through the steps' ServiceAccount (a dry-run audit, read only):
  helm test {{ .Release.Name }} -n {{ .Release.Namespace }}
{{- if include "dispatch-k8s.policyMode" . }}
Your ClusterQueues list no dispatch AdmissionCheck in this mode.
{{- else if .Values.kueue.enabled }}
Then list the AdmissionCheck in your ClusterQueues' spec.admissionChecks, and see it Active:
  kubectl get admissioncheck {{ .Values.kueue.admissionCheck }}
{{- end }}
{{- if eq $namespace "@CONFIG_NAMESPACE@" }}
Then check the install as a cluster admin (read only; exit 8 names what to fix):
  kubectl dispatch doctor -n {{ $steps }} --check {{ .Values.kueue.admissionCheck }}
{{- else }}
kubectl dispatch doctor looks for the controller and its parameters in @CONFIG_NAMESPACE@ only:
here they are in {{ $namespace }}, so its checks of them fail.
{{- end }}
Then start a TrainJob with the steps (docs/cli.md), and follow it:
  kubectl dispatch status NAME -n {{ $steps }}
"""

# `helm test`: a dry-run audit of the steps' namespace (dispatch-audit --all --dry-run=client:
# it reads, decides and prints, and sends no write) as the steps' ServiceAccount, so it checks
# the image, the API server's reach and the steps' read rights, and changes nothing.
TEST_POD: Final = """\
apiVersion: v1
kind: Pod
metadata:
  name: {{ include "dispatch-k8s.fullname" . }}-test
  namespace: {{ include "dispatch-k8s.stepsNamespace" . }}
  labels:
    {{- include "dispatch-k8s.labels" . | nindent 4 }}
  annotations:
    helm.sh/hook: test
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  restartPolicy: Never
  serviceAccountName: @STEPS_ACCOUNT@
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . | quote }}
  {{- end }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
@SECURITY@
  containers:
  - name: audit
    image: {{ include "dispatch-k8s.image" . | quote }}
    {{- with .Values.image.pullPolicy }}
    imagePullPolicy: {{ . }}
    {{- end }}
    command:
    - dispatch-audit
    - --all
    - --dry-run=client
    - --namespace={{ include "dispatch-k8s.stepsNamespace" . }}
    securityContext:
@CONTAINER_SECURITY@
"""

CHART_YAML: Final = """\
# Generated from config/ by scripts/render-dist: do not edit (README, Install).
apiVersion: v2
name: dispatch-k8s
description: >-
  Execution identity (DISPATCH_EPOCH, DISPATCH_ATTEMPT) for Kubeflow Trainer TrainJobs: the
  steps' RBAC, the dispatch-ready runtimes, the policies, and in Kueue mode the AdmissionCheck
  and its controller.
type: application
version: {version}
appVersion: "{version}"
# The guard-only policies need 1.30 (ValidatingAdmissionPolicy GA); all of them 1.36.
kubeVersion: ">=1.30.0-0"
annotations:
  licenses: Apache-2.0
"""


def schema(identities: Sequence[str]) -> dict[str, Any]:
    """values.schema.json: every value typed, unknown ones refused (a typo fails the install).

    `identities`, the keys the path guard reads from its parameters. What a pod's spec says
    (affinity, tolerations, env...) is left to the API server to check.
    """

    def closed(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "properties": properties}

    enabled = closed({"enabled": {"type": "boolean"}})
    usernames = {"type": "array", "items": {"type": "string", "minLength": 1}}
    strings = {"type": "object", "additionalProperties": {"type": "string"}}
    objects = {"type": "array", "items": {"type": "object"}}
    # A name the API server takes for a namespace (RFC 1123 label); empty for the default.
    namespace = {"type": "string", "pattern": "^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"}
    return {
        "$schema": "https://json-schema.org/draft-07/schema#",
        **closed(
            {
                "nameOverride": {"type": "string"},
                "fullnameOverride": {"type": "string"},
                "namespace": namespace,
                "createNamespace": {"type": "boolean"},
                "steps": closed({"namespace": namespace}),
                "image": closed(
                    {
                        "repository": {"type": "string", "minLength": 1},
                        "tag": {"type": "string"},
                        "digest": {"type": "string", "pattern": "^([a-z0-9]+:[a-f0-9]{32,})?$"},
                        "pullPolicy": {"enum": ["", "Always", "IfNotPresent", "Never"]},
                    }
                ),
                "imagePullSecrets": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string", "minLength": 1}},
                    },
                },
                "affinity": {"type": "object"},
                "nodeSelector": strings,
                "tolerations": objects,
                "topologySpreadConstraints": objects,
                "priorityClassName": {"type": "string"},
                "podAnnotations": strings,
                "podLabels": strings,
                "kueue": closed(
                    {
                        "enabled": {"type": "boolean"},
                        "mode": {"enum": ["auto", "policy", "check"]},
                        "admissionCheck": {"type": "string", "minLength": 1},
                    }
                ),
                "controller": closed(
                    {
                        "replicas": {"type": "integer", "minimum": 0},
                        "namespaces": {"type": "array", "items": {"type": "string"}},
                        "onRefusal": {"enum": ["reject", "retry", "wait"]},
                        "logLevel": {"enum": ["debug", "info", "warning", "error"]},
                        "extraArgs": {"type": "array", "items": {"type": "string"}},
                        "extraEnv": objects,
                        "resources": {"type": "object"},
                        "podDisruptionBudget": {"enum": ["auto", True, False]},
                    }
                ),
                "controllerIdentities": closed({key: usernames for key in identities}),
                "policies": {"enum": ["auto", "all", "guard-only"]},
                "monitoring": enabled,
                "argo": enabled,
                "tekton": enabled,
            }
        ),
    }


def by_key(text: str) -> dict[Key, Manifest]:
    """The objects of a rendered stream, by identity (helm orders them by kind, kustomize not)."""
    return {dist.key(o): o for o in dist.objects(text)}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the steps' scripts, the descriptions) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    )


_Dumper.add_representer(str, _str)


def _with_sentinels(value: Any, names: Mapping[str, str]) -> Any:
    """`value` with every string that is a key of `names` replaced by its sentinel.

    The keys: the image, the AdmissionCheck's name; each one's value, its sentinel.
    """
    if isinstance(value, dict):
        return {k: _with_sentinels(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_sentinels(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


def _controller_with_sentinels(deployment: Manifest) -> Manifest:
    """The controller's Deployment with a sentinel where each value goes.

    Its affinity goes to the values, as their default.
    """
    spec = deployment["spec"]
    template = spec["template"]
    (container,) = template["spec"]["containers"]
    optional = {v[0]: k for k, v in OPTIONAL.items()}
    container = {
        **container,
        "args": [*container["args"], GATE, NAMESPACES, ON_REFUSAL, LOG_LEVEL, EXTRA_ARGS],
        "env": [*container["env"], EXTRA_ENV],
        "resources": RESOURCES,
        optional["imagePullPolicy"]: "",
    }
    pod = {k: v for k, v in template["spec"].items() if k != "affinity"}
    for key in ("affinity", "nodeSelector", "tolerations", "topologySpreadConstraints"):
        pod[optional[key]] = ""
    pod |= {optional["priorityClassName"]: "", optional["imagePullSecrets"]: ""}
    metadata = {
        **template["metadata"],
        "labels": {**template["metadata"]["labels"], POD_LABELS: ""},
        optional["annotations"]: "",
    }
    template = {"metadata": metadata, "spec": {**pod, "containers": [container]}}
    return {**deployment, "spec": {**spec, "replicas": REPLICAS, "template": template}}


def _released(value: Any, namespaces: Mapping[str, str]) -> Any:
    """An object of config/ as the chart installs it, with sentinels for what a release sets.

    Every `namespace:` it names (its own, a subject's, a parameter's) by its sentinel in
    `namespaces`, the standard labels' sentinel first in its labels, and a Namespace's name by
    its sentinel.
    """

    def namespaced(v: Any) -> Any:
        if isinstance(v, dict):
            return {
                k: namespaces[x] if k == "namespace" and isinstance(x, str) else namespaced(x)
                for k, x in v.items()
            }
        return [namespaced(x) for x in v] if isinstance(v, list) else v

    o = namespaced(value)
    labels = o["metadata"].get("labels", {})
    # A label config/ sets itself (the Service's name, which its ServiceMonitor selects) stays.
    own = " ".join(k for k in STANDARD_LABELS if k in labels)
    metadata = {**o["metadata"], "labels": {LABELS: own, **labels}}
    if o["kind"] == "Namespace":
        metadata["name"] = namespaces[metadata["name"]]
    return {**o, "metadata": metadata}


def _labels(m: re.Match[str]) -> str:
    """The standard labels' template text, but for those the object sets itself (m[2])."""
    standard = 'include "dispatch-k8s.labels" .'
    if m[2] == "''":
        return f"{{{{- {standard} | nindent {len(m[1])} }}}}\n"
    own = " ".join(f'"{k}"' for k in m[2].split())
    return f"{{{{- omit ({standard} | fromYaml) {own} | toYaml | nindent {len(m[1])} }}}}\n"


def _optional(key: str, value: str, scalar: bool) -> Callable[[re.Match[str]], str]:
    """The template text of a key written only when `value` is set."""

    def replacement(m: re.Match[str]) -> str:
        if scalar:
            body = f"{m[1]}{key}: {{{{ . | quote }}}}\n"
        else:
            body = f"{m[1]}{key}:\n{{{{- toYaml . | nindent {len(m[1]) + 2} }}}}\n"
        return f"{{{{- with {value} }}}}\n{body}{{{{- end }}}}\n"

    return replacement


def _template_text(objects: Sequence[Manifest]) -> str:
    """The objects as YAML with the values' template text in place of the sentinels."""
    text = "".join(
        "---\n" + yaml.dump(o, Dumper=_Dumper, sort_keys=False, width=1_000_000) for o in objects
    )
    # The Argo templates' own {{...}} must reach the cluster as written.
    text = re.sub(r"\{\{|\}\}", lambda m: '{{ "' + m.group() + '" }}', text)
    substitutions: list[tuple[str, str | Callable[[re.Match[str]], str]]] = [
        (re.escape(IMAGE), '{{ include "dispatch-k8s.image" . | quote }}'),
        (re.escape(CHECK_NAME), "{{ .Values.kueue.admissionCheck | quote }}"),
        (re.escape(REPLICAS), "{{ .Values.controller.replicas }}"),
        (re.escape(NAMESPACE), '{{ include "dispatch-k8s.namespace" . }}'),
        (re.escape(STEPS_NAMESPACE), '{{ include "dispatch-k8s.stepsNamespace" . }}'),
        (rf"(?m)^( *){LABELS}: (.*)\n", _labels),
        (
            rf"(?m)^( *){POD_LABELS}: ''\n",
            lambda m: (
                "{{- with .Values.podLabels }}\n"
                f"{{{{- toYaml . | nindent {len(m[1])} }}}}\n"
                "{{- end }}\n"
            ),
        ),
        (
            rf"(?m)^( *)- {EXTRA_ARGS}\n",
            lambda m: (
                "{{- range .Values.controller.extraArgs }}\n"
                f"{m[1]}- {{{{ . | quote }}}}\n"
                "{{- end }}\n"
            ),
        ),
        (
            rf"(?m)^( *)- {EXTRA_ENV}\n",
            lambda m: (
                "{{- with .Values.controller.extraEnv }}\n"
                f"{{{{- toYaml . | nindent {len(m[1])} }}}}\n"
                "{{- end }}\n"
            ),
        ),
        *((rf"(?m)^( *){sentinel}: ''\n", _optional(*o)) for sentinel, o in OPTIONAL.items()),
        (
            rf"(?m)^( *)resources: {RESOURCES}$",
            lambda m: (
                f"{m[1]}resources:\n"
                f"{{{{- toYaml .Values.controller.resources | nindent {len(m[1]) + 2} }}}}"
            ),
        ),
        (  # one line per username, as pipelines/policies/controllers.yaml writes them
            rf"(?m)^( *)data: {IDENTITIES}$",
            lambda m: (
                f"{m[1]}data:\n"
                "{{- range $key, $users := .Values.controllerIdentities }}\n"
                f'{m[1]}  {{{{ $key }}}}: {{{{ printf "%s\\n" (join "\\n" $users) | quote }}}}\n'
                "{{- end }}"
            ),
        ),
        (
            rf"(?m)^( *)- {GATE}\n",
            lambda m: (
                '{{- if include "dispatch-k8s.policyMode" . }}\n'
                f"{m[1]}- --no-gate\n"
                "{{- end }}\n"
            ),
        ),
        (
            rf"(?m)^( *)- {NAMESPACES}\n",
            lambda m: (
                "{{- with .Values.controller.namespaces }}\n"
                f'{m[1]}- {{{{ join "," . | printf "--namespaces=%s" | quote }}}}\n'
                "{{- end }}\n"
            ),
        ),
        (  # reject is the controller's own default: its flag is written only for the others
            rf"(?m)^( *)- {ON_REFUSAL}\n",
            lambda m: (
                '{{- if ne .Values.controller.onRefusal "reject" }}\n'
                f'{m[1]}- {{{{ printf "--on-refusal=%s" .Values.controller.onRefusal | quote }}}}\n'
                "{{- end }}\n"
            ),
        ),
        (  # info is the controller's own default: its flag is written only for the others
            rf"(?m)^( *)- {LOG_LEVEL}\n",
            lambda m: (
                '{{- if ne .Values.controller.logLevel "info" }}\n'
                f'{m[1]}- {{{{ printf "--log-level=%s" .Values.controller.logLevel | quote }}}}\n'
                "{{- end }}\n"
            ),
        ),
    ]
    for pattern, replacement in substitutions:
        text = re.sub(pattern, replacement, text)
    left = [
        s
        for s in (
            IMAGE,
            CHECK_NAME,
            REPLICAS,
            RESOURCES,
            NAMESPACES,
            ON_REFUSAL,
            LOG_LEVEL,
            IDENTITIES,
            NAMESPACE,
            STEPS_NAMESPACE,
            LABELS,
            POD_LABELS,
            EXTRA_ARGS,
            EXTRA_ENV,
            GATE,
            *OPTIONAL,
        )
        if s in text
    ]
    assert not left, f"sentinels left in a template: {left}"
    return text


def _conditional(condition: str, text: str) -> str:
    return f"{{{{- if {condition} }}}}\n{text}{{{{- end }}}}\n"


def files(*, kustomize: Path) -> dict[str, str]:
    """Every file of the chart, by its path under charts/dispatch-k8s, as config/ renders it."""
    renders = {
        overlay: by_key(dist.build(dist.CONFIG / overlay, kustomize=kustomize))
        for overlay in {o for _, *pair in CHOICES.values() for o in pair}
    }
    chosen: dict[str, list[Key]] = {}
    for name, (_, with_them, without) in CHOICES.items():
        chosen[name] = [k for k in renders[with_them] if k not in renders[without]]
    union: dict[Key, Manifest] = {}
    for overlay, render in renders.items():
        for k, o in render.items():
            if overlay == "kueue-policy" and k[1] == "Deployment":
                continue  # check mode's, but --no-gate: the GATE sentinel's choice
            # An object the overlays share must be the same in each, or no one file can hold it.
            assert union.setdefault(k, o) == o, f"{k} differs between the overlays"
    in_a_choice = [k for keys in chosen.values() for k in keys]
    assert len(in_a_choice) == len(set(in_a_choice)), "an object in two choices"
    base = [k for k in renders["kueue"] if k not in in_a_choice]

    # Kueue mode's own objects: the controller's Deployment and the AdmissionCheck.
    (deployment,) = [union[k] for k in chosen["kueue.yaml"] if k[1] == "Deployment"]
    (check,) = [name for _, kind, _, name in chosen["kueue.yaml"] if kind == "AdmissionCheck"]
    names = {default_image(): IMAGE, check: CHECK_NAME}

    identities: dict[str, str] = union[CONTROLLERS]["data"]
    with_sentinels = {
        CONTROLLERS: {**union[CONTROLLERS], "data": IDENTITIES},
        dist.key(deployment): _controller_with_sentinels(deployment),
    }
    # config/ puts the controller in the Namespace it makes, the steps in one other namespace.
    (controller_namespace,) = [name for _, kind, _, name in union if kind == "Namespace"]
    others = {ns for _, _, ns, _ in union if ns not in ("", controller_namespace)}
    (steps_namespace,) = others
    namespaces = {controller_namespace: NAMESPACE, steps_namespace: STEPS_NAMESPACE}

    def text(keys: list[Key]) -> str:
        parts = []
        for k in keys:
            o = _released(with_sentinels.get(k, union[k]), namespaces)
            one = _template_text([_with_sentinels(o, names)])
            parts.append(_conditional(WHEN[k[1]], one) if k[1] in WHEN else one)
        text = "".join(parts)
        assert controller_namespace not in text, f"{controller_namespace} named in a template"
        return text

    templates = {
        f"templates/{BASE}": HEADER + text(base),
        **{
            f"templates/{name}": HEADER
            + (MONITORING_NEEDS_KUEUE if name == "monitoring.yaml" else "")
            + (POLICY_MODE_NEEDS_MAP if name == "kueue.yaml" else "")
            + _conditional(CHOICES[name][0], text(keys))
            for name, keys in chosen.items()
        },
    }
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    resources = yaml.safe_dump(container["resources"], sort_keys=False)
    affinity = yaml.safe_dump(pod["affinity"], sort_keys=False)
    (steps_account,) = [
        name for _, kind, ns, name in union if kind == "ServiceAccount" and ns == steps_namespace
    ]
    values = VALUES.format(
        repository=default_image().rsplit(":", 1)[0],
        check=check,
        replicas=deployment["spec"]["replicas"],
        resources="".join(f"    {line}\n" for line in resources.splitlines()),
        affinity="".join(f"  {line}\n" for line in affinity.splitlines()),
        identities="".join(
            f"  {key}:\n" + "".join(f"  - {user}\n" for user in users.splitlines())
            for key, users in identities.items()
        ),
    )
    return {
        "Chart.yaml": CHART_YAML.format(version=version()),
        "values.yaml": values,
        "values.schema.json": json.dumps(schema(list(identities)), indent=2) + "\n",
        "templates/_helpers.tpl": HELPERS,
        "templates/NOTES.txt": NOTES.replace("@STEPS_ACCOUNT@", steps_account).replace(
            "@CONFIG_NAMESPACE@", controller_namespace
        ),
        "templates/tests/read-only.yaml": TEST_POD.replace("@STEPS_ACCOUNT@", steps_account)
        .replace("@SECURITY@", _indented(pod["securityContext"], 4))
        .replace("@CONTAINER_SECURITY@", _indented(container["securityContext"], 6)),
        **templates,
    }


def _indented(value: Manifest, indent: int) -> str:
    """`value` as YAML lines, each indented by `indent` spaces (no final newline)."""
    text = yaml.safe_dump(value, sort_keys=False).rstrip("\n")
    return "\n".join(" " * indent + line for line in text.splitlines())


def checked_in() -> dict[str, str]:
    """Every file under charts/dispatch-k8s as checked in."""
    return {
        str(path.relative_to(CHART)): path.read_text()
        for path in sorted(CHART.rglob("*"))
        if path.is_file()
    }


def main(argv: list[str]) -> int:
    """Write the chart; with --check, only report (exit 1) whether it differs."""
    given = dist.arguments(argv, about="Render charts/dispatch-k8s from config/.")
    check = given.check
    wanted, present = files(kustomize=given.kustomize), checked_in()
    if wanted == present:
        return 0
    if check:
        stale = sorted(p for p in wanted.keys() | present.keys() if wanted.get(p) != present.get(p))
        sys.stderr.write(f"charts/dispatch-k8s: {', '.join(stale)} differ from config/\n")
        return 1
    for path in present.keys() - wanted.keys():
        (CHART / path).unlink()
    for path, text in wanted.items():
        (CHART / path).parent.mkdir(parents=True, exist_ok=True)
        (CHART / path).write_text(text)
    sys.stderr.write("charts/dispatch-k8s: written\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
