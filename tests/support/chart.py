"""The Helm chart charts/dispatch-k8s, generated from config/'s overlays by the real kustomize.

Nothing in the chart is written by hand: `python -m tests.support.chart` (scripts/render-dist)
renders each overlay, files every object under the choice that brings it (the objects of
config/plain and config/policies-guard-only in every install; what config/kueue adds over plain
under `kueue.enabled`, and so on), and puts the values in where the overlays name the image, the
AdmissionCheck, the replicas, the resources and the controllers the path guard trusts.
tests/unit/test_chart.py fails when the checked-in chart differs from this, and checks
`helm template` against the kustomize render of the matching choices. helm is built from its
Go module like kustomize (tests/cluster/versions.toml).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import yaml

from tests.cluster import binaries, kube
from tests.cluster.kube import Key
from tests.support import dist
from tests.support.shipped import REPO, Manifest, default_image, version

CHART: Final = REPO / "charts" / "dispatch-k8s"
HEADER: Final = "# Generated from config/ by scripts/render-dist: do not edit (README, Install).\n"
# Template file -> the condition its objects are rendered under, and the overlays that decide
# which objects it holds: those of `with_them` that `without` lacks.
Choice = tuple[str, str, str]
CHOICES: Final[dict[str, Choice]] = {
    "kueue.yaml": (".Values.kueue.enabled", "kueue", "plain"),
    "raise-on-open.yaml": ('eq .Values.policies "all"', "kueue", "policies-guard-only"),
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
# The path guard's parameters (pipelines/policies/controllers.yaml): who each controller is.
CONTROLLERS: Final = ("v1", "ConfigMap", "dispatch-system", "dispatch-k8s-controllers")

HELPERS: Final = """\
{{/* The step image: image.repository:image.tag, the tag by default the chart's appVersion. */}}
{{- define "dispatch-k8s.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}
"""
# The metrics are the controller's: without it the Service would select no pod.
MONITORING_NEEDS_KUEUE: Final = """\
{{- if and .Values.monitoring.enabled (not .Values.kueue.enabled) }}
{{- fail "monitoring.enabled needs kueue.enabled: the metrics are the controller's" }}
{{- end }}
"""

VALUES: Final = """\
# dispatch-k8s's chart: the objects of config/'s overlays (README, Install), chosen by these
# values. The defaults install what config/kueue (dist/install-kueue.yaml) does.
# Generated from config/ by scripts/render-dist: do not edit; set values with --set or -f.

# The step image: the controller's container, and the Argo and Tekton parameters that default
# to it. An empty tag is the chart's appVersion.
image:
  repository: {repository}
  tag: ""

# Kueue mode: the AdmissionCheck and the controller that gates its Workloads (config/kueue).
# false is plain mode, neither (config/plain, dist/install.yaml).
kueue:
  enabled: true
  # The AdmissionCheck's name, as your ClusterQueues list it; also the default check of the
  # Argo and Tekton steps.
  admissionCheck: {check}

# The controller's Deployment (pipelines/controller/20-deployment.yaml).
controller:
  replicas: {replicas}
  # Gate the Workloads and audit the TrainJobs of these namespaces only (its --namespaces);
  # empty: every namespace.
  namespaces: []
  # What a refused Workload's check is set to (its --on-refusal): reject (Kueue deactivates
  # the Workload and frees its quota), retry (evicted, requeued a minute on), or wait
  # (Pending, the quota held until a person acts).
  onRefusal: reject
  # How much the controller logs (its --log-level): debug, info, warning or error.
  logLevel: info
  resources:
{resources}
# Who the path guard trusts to write what it guards (the ConfigMap dispatch-k8s-controllers,
# docs/policies.md): the usernames each controller writes as. The defaults are the upstream
# installs' ServiceAccounts; name yours where they run as other users. Whoever may set these
# may name themselves a controller: give that right only to whoever may edit the policies.
controllerIdentities:
{identities}
# all: every policy of pipelines/policies. guard-only: without the MutatingAdmissionPolicy,
# for Kubernetes 1.30 to 1.35 (config/policies-guard-only).
policies: all

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
    """values.schema.json: every value typed, unknown ones refused (a typo fails the install);
    `identities`, the keys the path guard reads from its parameters."""

    def closed(properties: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "properties": properties}

    enabled = closed({"enabled": {"type": "boolean"}})
    usernames = {"type": "array", "items": {"type": "string", "minLength": 1}}
    return {
        "$schema": "https://json-schema.org/draft-07/schema#",
        **closed(
            {
                "image": closed(
                    {"repository": {"type": "string", "minLength": 1}, "tag": {"type": "string"}}
                ),
                "kueue": closed(
                    {
                        "enabled": {"type": "boolean"},
                        "admissionCheck": {"type": "string", "minLength": 1},
                    }
                ),
                "controller": closed(
                    {
                        "replicas": {"type": "integer", "minimum": 0},
                        "namespaces": {"type": "array", "items": {"type": "string"}},
                        "onRefusal": {"enum": ["reject", "retry", "wait"]},
                        "logLevel": {"enum": ["debug", "info", "warning", "error"]},
                        "resources": {"type": "object"},
                    }
                ),
                "controllerIdentities": closed({key: usernames for key in identities}),
                "policies": {"enum": ["all", "guard-only"]},
                "monitoring": enabled,
                "argo": enabled,
                "tekton": enabled,
            }
        ),
    }


def by_key(text: str) -> dict[Key, Manifest]:
    """The objects of a rendered stream, by identity (helm orders them by kind, kustomize not)."""
    return {kube.key(o): o for o in dist.objects(text)}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the steps' scripts, the descriptions) as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    )


_Dumper.add_representer(str, _str)


def _with_sentinels(value: Any, names: Mapping[str, str]) -> Any:
    """`value` with every string that is a key of `names` (the image, the AdmissionCheck's
    name) replaced by its sentinel, the key's value."""
    if isinstance(value, dict):
        return {k: _with_sentinels(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_sentinels(v, names) for v in value]
    return names.get(value, value) if isinstance(value, str) else value


def _controller_with_sentinels(deployment: Manifest) -> Manifest:
    spec = deployment["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    container = {
        **container,
        "args": [*container["args"], NAMESPACES, ON_REFUSAL, LOG_LEVEL],
        "resources": RESOURCES,
    }
    template = {**spec["template"], "spec": {**spec["template"]["spec"], "containers": [container]}}
    return {**deployment, "spec": {**spec, "replicas": REPLICAS, "template": template}}


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
        )
        if s in text
    ]
    assert not left, f"sentinels left in a template: {left}"
    return text


def _conditional(condition: str, text: str) -> str:
    return f"{{{{- if {condition} }}}}\n{text}{{{{- end }}}}\n"


def files() -> dict[str, str]:
    """Every file of the chart, by its path under charts/dispatch-k8s, as config/ renders it."""
    renders = {
        overlay: by_key(dist.build(dist.CONFIG / overlay))
        for overlay in {o for _, *pair in CHOICES.values() for o in pair}
    }
    chosen: dict[str, list[Key]] = {}
    for name, (_, with_them, without) in CHOICES.items():
        chosen[name] = [k for k in renders[with_them] if k not in renders[without]]
    union: dict[Key, Manifest] = {}
    for render in renders.values():
        for k, o in render.items():
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
        kube.key(deployment): _controller_with_sentinels(deployment),
    }

    def text(keys: list[Key]) -> str:
        objects = [with_sentinels.get(k, union[k]) for k in keys]
        return _template_text(_with_sentinels(objects, names))

    templates = {
        f"templates/{BASE}": HEADER + text(base),
        **{
            f"templates/{name}": HEADER
            + (MONITORING_NEEDS_KUEUE if name == "monitoring.yaml" else "")
            + _conditional(CHOICES[name][0], text(keys))
            for name, keys in chosen.items()
        },
    }
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    resources = yaml.safe_dump(container["resources"], sort_keys=False)
    values = VALUES.format(
        repository=default_image().rsplit(":", 1)[0],
        check=check,
        replicas=deployment["spec"]["replicas"],
        resources="".join(f"    {line}\n" for line in resources.splitlines()),
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
        **templates,
    }


def checked_in() -> dict[str, str]:
    """Every file under charts/dispatch-k8s as checked in."""
    return {
        str(path.relative_to(CHART)): path.read_text()
        for path in sorted(CHART.rglob("*"))
        if path.is_file()
    }


def helm() -> Path:
    """The helm binary of versions.toml, built if it is not cached yet."""
    (component,) = [c for c in binaries.components(release=True) if c.name == "helm"]
    return binaries.build(component, binaries.go_version()) / "helm"


def run_helm(*args: str, home: Path, kubeconfig: Path | None = None) -> str:
    """Run helm with its cache, config and data under `home` (never the user's); its stdout."""
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    done = subprocess.run([str(helm()), *args], env=env, text=True, capture_output=True)
    if done.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def template(values: Sequence[str], *, home: Path) -> str:
    """`helm template` of the checked-in chart with these `--set` values."""
    sets = [arg for value in values for arg in ("--set", value)]
    return run_helm("template", "dispatch-k8s", str(CHART), *sets, home=home)


def main(argv: list[str]) -> int:
    """Write the chart; with --check, only report (exit 1) whether it differs."""
    check = argv == ["--check"]
    wanted, present = files(), checked_in()
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
