"""The shipped deployment files (issue 17): the Kubernetes manifests validate, strictly, against the schemas bundled
in PyPI's kubernetes-validate (offline) for the oldest and newest versions it knows; the ConfigMap holds
deploy/voxgate-gpu.toml verbatim and that config loads; the container's command line parses; the HAProxy file
passes `haproxy -c`."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from processes import HAPROXY_CFG, REPO, haproxy_binary
from voxgate.gateway.cli.main import build_parser
from voxgate.gateway.config import load_config

MANIFESTS = sorted((REPO / "deploy" / "kubernetes").glob("*.yaml"))
VERSIONS = ("1.29.0", "1.37.0")


def kubernetes_validate():
    try:
        import kubernetes_validate
    except ImportError:
        reason = "kubernetes-validate is not installed (pip install -e '.[test]')"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return kubernetes_validate


def resources(path: Path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def by_kind(kind: str) -> dict:
    (found,) = [doc for path in MANIFESTS for doc in resources(path) if doc["kind"] == kind
                and doc["metadata"]["name"].startswith("voxgate")]
    return found


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_validates_strictly(path: Path, version: str):
    validator = kubernetes_validate()
    for resource in resources(path):
        validator.validate(resource, version, strict=True)


def test_the_validator_rejects_a_misspelled_field():
    validator = kubernetes_validate()
    deployment = by_kind("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"httpGet": {"path": "/health"}}
    with pytest.raises(validator.ValidationError):
        validator.validate(deployment, VERSIONS[-1], strict=True)


def test_the_configmap_holds_the_gpu_config_and_it_loads():
    toml = by_kind("ConfigMap")["data"]["voxgate.toml"]
    assert toml == (REPO / "deploy" / "voxgate-gpu.toml").read_text()
    config = load_config(REPO / "deploy" / "voxgate-gpu.toml")
    assert config.engine == "qwen3tts" and config.max_queued_streams > 0


def test_the_pod_spec_matches_the_gateway():
    deployment = by_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = build_parser().parse_args(container["args"])
    assert args.device == "cuda:0" and args.config == "/etc/voxgate/voxgate.toml"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    config = load_config(REPO / "deploy" / "voxgate-gpu.toml")
    pre_stop_s = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    # The pod must outlive the wait for endpoints, the drain, and the process's own hard deadline.
    assert pod["terminationGracePeriodSeconds"] >= pre_stop_s + config.shutdown_grace_s + 2
    hpa = by_kind("HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "voxgate_engine_queue_depth"


def test_haproxy_accepts_the_shipped_config():
    done = subprocess.run([haproxy_binary(), "-c", "-f", str(HAPROXY_CFG)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
