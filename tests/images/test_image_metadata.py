"""What the image built for real says about itself: its OCI labels, and the CycloneDX SBOM of
its Python environment, made inside the build. No cluster: the Docker engine alone."""

from __future__ import annotations

import json
import re
import subprocess
import tomllib
from typing import Any, Final

import pytest

from tests.cluster import engine
from tests.images.containers import run_container
from tests.support.shipped import REPO, version

pytestmark = pytest.mark.images
SBOM: Final = "/usr/share/doc/dispatch-k8s/sbom.cdx.json"
# Every distribution in the image's venv, by its metadata name and version.
INSTALLED: Final = (
    "import json, importlib.metadata as m; "
    "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"
)


def normalized(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def in_image(step_image: str, *command: str) -> str:
    run = run_container(step_image, list(command))
    assert run.code == 0, run.stderr
    return run.stdout


@pytest.fixture(scope="module")
def sbom(step_image: str) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(in_image(step_image, "cat", SBOM))
    return parsed


def test_the_labels_say_title_version_license_revision_and_source(step_image: str) -> None:
    labels = engine.image_labels(step_image)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    oci = {k.removeprefix("org.opencontainers.image."): v for k, v in labels.items()}
    assert oci.pop("source")  # the checkout's origin remote, or "unknown"
    assert oci == {
        "title": "dispatch-k8s",
        "version": version(),
        "licenses": "Apache-2.0",
        "revision": head.stdout.strip() if head.returncode == 0 else "unknown",
    }


def test_the_sbom_is_cyclonedx_json_for_the_project(sbom: dict[str, Any]) -> None:
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["specVersion"] == "1.6"
    root = sbom["metadata"]["component"]
    assert (root["name"], root["version"], root["type"]) == (
        "dispatch-k8s",
        version(),
        "application",
    )
    assert root["licenses"][0]["license"]["id"] == "Apache-2.0"


def test_the_sbom_lists_exactly_what_the_venv_holds(step_image: str, sbom: dict[str, Any]) -> None:
    installed = json.loads(in_image(step_image, "/opt/dispatch/bin/python", "-c", INSTALLED))
    listed = {normalized(c["name"]): c["version"] for c in sbom["components"]}
    assert listed == {normalized(n): v for n, v in installed.items() if n != "dispatch-k8s"}
    # The project's own dependencies are its root's: kubernetes, pydantic-settings, loguru...
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = {
        normalized(re.split(r"[<>=!~; \[]", d, maxsplit=1)[0]) for d in project["dependencies"]
    }
    assert {"kubernetes", "pydantic-settings", "loguru"} <= wanted <= listed.keys()
    (root,) = [
        d for d in sbom["dependencies"] if d["ref"] == sbom["metadata"]["component"]["bom-ref"]
    ]
    assert {normalized(ref.split("==")[0]) for ref in root["dependsOn"]} == wanted


def test_the_sbom_tool_is_not_in_the_image(step_image: str, sbom: dict[str, Any]) -> None:
    names = {normalized(c["name"]) for c in sbom["components"]}
    assert not names & {"cyclonedx-bom", "cyclonedx-python-lib", "pip", "setuptools"}
    out = in_image(step_image, "sh", "-c", "command -v cyclonedx-py; ls -d /opt/sbom-tool; true")
    assert out == ""
