"""pipelines/monitoring/: the dashboard and the alerts name only metrics the controller
exposes, and the Service, ServiceMonitor and rules agree with the Deployment they watch."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import promql_parser
import pytest
from prometheus_client import REGISTRY

import dispatch_k8s.controller.serve  # noqa: F401  # registers the controller's metrics
from tests.support.controller_identity import DEPLOYMENT
from tests.support.shipped import DASHBOARD, Manifest, documents, monitoring_object

# Series Prometheus itself writes for every target it scrapes.
SCRAPE_SERIES: Final = frozenset({"up"})
# The sample names prometheus_client exposes for a metric family of each type.
SUFFIXES: Final = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
}
JOB: Final = "dispatch-admission-controller"


def exposed() -> frozenset[str]:
    """Every sample name the controller's /metrics can show, and Prometheus' own per target."""
    families = {family.name: family.type for family in REGISTRY.collect()}
    names = {name + suffix for name, kind in families.items() for suffix in SUFFIXES[kind]}
    return frozenset(names) | SCRAPE_SERIES


KNOWN: Final = exposed()

# Grafana's interval variables, replaced before parsing as Grafana replaces them.
_GRAFANA_INTERVALS: Final = re.compile(r"\$__(?:rate_interval|interval|range)\b")
_LABEL_VALUES: Final = re.compile(r"^label_values\(\s*(?P<selector>[^,]+),\s*\w+\s*\)$")


def metric_names(expression: str) -> set[str]:
    """The metric names a PromQL expression selects, read from its syntax tree (promql-parser,
    a port of Prometheus' parser: a syntax error or an unknown function raises ValueError)."""
    names: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name: {expression}"
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(_GRAFANA_INTERVALS.sub("1m", expression)), visit)
    return names


def _exprs(node: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield where, value
            else:
                yield from _exprs(value, where)
    elif isinstance(node, list):
        for item in node:
            yield from _exprs(item, where)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_expressions(board: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    found = [
        pair for panel in board["panels"] for pair in _exprs(panel, f"panel {panel['title']!r}")
    ]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            matched = _LABEL_VALUES.match(variable["query"]["query"])
            assert matched, f"variable {variable['name']}: not label_values(selector, label)"
            found.append((f"variable {variable['name']!r}", matched["selector"]))
    return found


def rule_expressions() -> list[tuple[str, str]]:
    return [
        (f"alert {rule['alert']}", rule["expr"])
        for group in monitoring_object("PrometheusRule")["spec"]["groups"]
        for rule in group["rules"]
    ]


EXPRESSIONS: Final = dashboard_expressions(dashboard()) + rule_expressions()


@pytest.mark.parametrize(("where", "expression"), EXPRESSIONS, ids=[w for w, _ in EXPRESSIONS])
def test_every_expression_names_only_metrics_the_controller_exposes(
    where: str, expression: str
) -> None:
    names = metric_names(expression)
    assert names, f"{where} names no metric: {expression}"
    assert names <= KNOWN, f"{where}: unknown {sorted(names - KNOWN)}"


@pytest.mark.parametrize(
    ("expression", "names"),
    [
        ('rate(a_total{job="b_total"}[5m])', {"a_total"}),
        ("histogram_quantile(0.99, sum by (le) (rate(h_bucket[$__rate_interval])))", {"h_bucket"}),
        ("sum by (k) ((c unless c offset 15m) or increase(d[15m])) > 1e3", {"c", "d"}),
        ('absent(up{job="x"} == 1)', {"up"}),
    ],
    ids=["matcher-value", "grafana-interval", "unless-offset", "absent"],
)
def test_metric_names_reads_each_selector(expression: str, names: set[str]) -> None:
    assert metric_names(expression) == names


@pytest.mark.parametrize(
    "expression",
    ["sum by (le (rate(x[5m]))", "irate2(x[5m])", "x offset $job"],
    ids=["unclosed", "unknown-function", "variable-not-replaced"],
)
def test_an_expression_prometheus_would_refuse_is_caught(expression: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  # the parser's only error type
        metric_names(expression)


def test_a_misspelt_name_in_the_dashboard_is_caught() -> None:
    board = dashboard()
    text = json.dumps(board).replace("dispatch_admission_audits_total", "dispatch_audit_total")
    used = {n for _, e in dashboard_expressions(json.loads(text)) for n in metric_names(e)}
    assert used - KNOWN == {"dispatch_audit_total"}


def test_every_metric_asked_for_has_a_panel() -> None:
    used = {n for _, e in dashboard_expressions(dashboard()) for n in metric_names(e)}
    asked = {
        "dispatch_admission_findings_total",
        "dispatch_admission_detection_latency_seconds_bucket",
        "dispatch_admission_watched_objects",
        "dispatch_admission_audits_total",
        "dispatch_admission_leader",
        "dispatch_admission_reservations_gated_total",
        "dispatch_admission_raises_total",
        "dispatch_admission_approvals_total",
        "dispatch_admission_refusals_total",
        "dispatch_admission_reserved_to_approved_seconds_bucket",
        "dispatch_admission_queue_depth",
        "dispatch_admission_reconcile_total",
        "dispatch_admission_reconcile_errors_total",
        "dispatch_admission_reconcile_seconds_bucket",
        "dispatch_admission_workqueue_retries_total",
    }
    assert asked <= used, sorted(asked - used)


def test_the_alerts_cover_findings_down_and_no_leader() -> None:
    by_alert = {where: metric_names(e) for where, e in rule_expressions()}
    assert "dispatch_admission_findings_total" in by_alert["alert DispatchAuditFinding"]
    assert by_alert["alert DispatchAdmissionControllerDown"] == {"up"}
    assert by_alert["alert DispatchAdmissionNoLeader"] == {"dispatch_admission_leader"}
    assert by_alert["alert DispatchAdmissionGateErrors"] == {
        "dispatch_admission_reconcile_errors_total"
    }
    for where, expression in rule_expressions():
        assert f'job="{JOB}"' in expression, f"{where} selects another scrape job"


def test_the_dashboard_panels_are_well_formed() -> None:
    board = dashboard()
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in board["panels"]:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, f"{panel['title']} is wider than the grid"
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert '{job="$job"}' in target["expr"], f"{panel['title']}: not the chosen job"


def _deployment() -> Manifest:
    (found,) = [d for d in documents(DEPLOYMENT) if d["kind"] == "Deployment"]
    return found


def test_the_service_reaches_the_deployments_metrics_port() -> None:
    pod = _deployment()["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    service = monitoring_object("Service")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    (container_port,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    # /metrics is served apart, over TLS, on --metrics-address; a loopback one no Service
    # could reach.
    (address,) = [a for a in container["args"] if a.startswith("--metrics-address=")]
    host, _, listened = address.removeprefix("--metrics-address=").rpartition(":")
    assert host == "0.0.0.0"
    assert int(listened) == container_port["containerPort"]


def test_the_scrape_is_tls_with_a_token_whose_user_the_reader_role_lets_in() -> None:
    (endpoint,) = monitoring_object("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    reader = monitoring_object("ClusterRole")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]


def test_the_service_monitor_selects_the_service_and_its_port() -> None:
    service, monitor = monitoring_object("Service"), monitoring_object("ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    # The scrape's job label is the Service's name label, what the rules select, whatever a
    # namePrefix makes of the Service's name.
    assert service["metadata"]["labels"][monitor["spec"]["jobLabel"]] == JOB
