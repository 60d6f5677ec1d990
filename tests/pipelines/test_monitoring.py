"""pipelines/monitoring/ against prometheus-operator's own CRD schemas (v0.85.0, from its Go
module; tests/cluster/versions.toml): the strict server-side dry run that accepts every shipped
object (test_dry_run.py, which dry-runs all of pipelines/: `-k monitoring`) refuses an unknown
field or a value of the wrong type. The schemas check structure only: the PromQL, which
prometheus-operator's admission webhook would check, tests/unit/test_monitoring_manifests.py
parses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from tests.cluster import kube
from tests.support.shipped import Manifest, monitoring_object

pytestmark = [pytest.mark.pipelines, pytest.mark.cluster]


def misspelt_endpoint_field() -> Manifest:
    monitor = monitoring_object("ServiceMonitor")
    endpoint = monitor["spec"]["endpoints"][0]
    endpoint["honourLabels"] = endpoint.pop("honorLabels")
    return monitor


def interval_of_the_wrong_type() -> Manifest:
    monitor = monitoring_object("ServiceMonitor")
    monitor["spec"]["endpoints"][0]["interval"] = 15
    return monitor


def misspelt_rule_field() -> Manifest:
    rules = monitoring_object("PrometheusRule")
    rule = rules["spec"]["groups"][0]["rules"][0]
    rule["annotation"] = rule.pop("annotations")
    return rules


def duration_not_a_duration() -> Manifest:
    rules = monitoring_object("PrometheusRule")
    rules["spec"]["groups"][1]["rules"][0]["for"] = "5 minutes"
    return rules


@pytest.mark.usefixtures("pipeline_crds")
@pytest.mark.parametrize(
    ("broken", "message"),
    [
        (misspelt_endpoint_field, 'unknown field "spec.endpoints[0].honourLabels"'),
        (interval_of_the_wrong_type, "spec.endpoints[0].interval: Invalid value"),
        (misspelt_rule_field, 'unknown field "spec.groups[0].rules[0].annotation"'),
        (duration_not_a_duration, "spec.groups[1].rules[0].for in body should match"),
    ],
    ids=["monitor-misspelt-field", "monitor-wrong-type", "rule-misspelt-field", "rule-bad-for"],
)
def test_the_dry_run_refuses_a_broken_object(
    broken: Callable[[], Manifest], message: str, api_client: client.ApiClient, namespace: str
) -> None:
    """The schemas are real: a typo or a wrong type the YAML parser accepts is refused."""
    assert message in kube.refusal(api_client, broken(), namespace=namespace)
