"""Deployment files against the code, without a Docker engine: every variable,
command, port and path they use must exist in the project, and the image's install
steps must work when replayed in a fresh virtualenv."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from streamdedup.cli.reference import render
from streamdedup.cli.table import COMMANDS
from streamdedup.ops.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def env_names(command: str) -> set[str]:
    return {o.env for g in COMMANDS[command][1] for o in g.options}


def flags(command: str) -> set[str]:
    return {f"--{o.name}" for g in COMMANDS[command][1] for o in g.options} | {"--config"}


def metric_families() -> set[str]:
    """Every metric a worker or a segment server exposes."""
    from streamdedup.ops.metrics import SegmentServerMetrics

    registries = (Metrics().registry, SegmentServerMetrics().registry)
    return {m.name for r in registries for m in r.collect()}


def check_invocation(argv: list[str]) -> None:
    """`streamdedup COMMAND --flag ...`: the command and every flag exist."""
    assert argv[0] in COMMANDS, argv
    for arg in argv[1:]:
        if arg.startswith("--"):
            assert arg.split("=", 1)[0] in flags(argv[0]), (argv[0], arg)


def check_env(command: str, env: dict[str, Any]) -> None:
    ours = {k for k in env if k.startswith("STREAMDEDUP_")}
    unknown = ours - env_names(command)
    assert not unknown, f"{command} has no option for {sorted(unknown)}"


def under(path: str, parent: str) -> bool:
    return Path(path).is_relative_to(Path(parent))


# ---------------------------------------------------------------- docs


def test_configuration_reference_is_current() -> None:
    assert (ROOT / "docs" / "configuration.md").read_text() == render(), (
        "docs/configuration.md is out of date: python -m streamdedup.cli.reference > "
        "docs/configuration.md"
    )


def test_every_option_is_in_the_reference() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    for name, (_, groups) in COMMANDS.items():
        assert f"## `streamdedup {name}`" in text
        for g in groups:
            for o in g.options:
                assert f"`{o.env}`" in text


# ---------------------------------------------------------------- Dockerfile


def dockerfile() -> list[tuple[str, str]]:
    text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def docker_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in dockerfile():
        if word == "ENV":
            for item in shlex.split(rest):
                k, _, v = item.partition("=")
                env[k] = v
    return env


def test_dockerfile_matches_the_cli() -> None:
    steps = dockerfile()
    env = docker_env()
    check_env("worker", env)
    assert next(r for w, r in steps if w == "FROM").endswith("AS build"), "multi-stage"
    assert len([1 for w, _ in steps if w == "FROM"]) == 2
    user = [r for w, r in steps if w == "USER"][-1]
    assert user not in ("root", "0")
    (volume,) = [json.loads(r)[0] for w, r in steps if w == "VOLUME"]
    assert under(env["STREAMDEDUP_INDEX"], volume)
    (entry,) = [json.loads(r) for w, r in steps if w == "ENTRYPOINT"]
    (cmd,) = [json.loads(r) for w, r in steps if w == "CMD"]
    assert entry == ["streamdedup"]
    check_invocation(cmd)
    (health,) = [r for w, r in steps if w == "HEALTHCHECK"]
    # (the port the container's environment says, the image's by default)
    assert "'http://127.0.0.1:%s/healthz' % os.environ.get('STREAMDEDUP_METRICS_PORT'" in health
    assert f"'STREAMDEDUP_METRICS_PORT', '{env['STREAMDEDUP_METRICS_PORT']}')" in health
    assert env["STREAMDEDUP_METRICS_HOST"] == "0.0.0.0"
    (expose,) = [r for w, r in steps if w == "EXPOSE"]
    assert expose == env["STREAMDEDUP_METRICS_PORT"]
    for w, r in steps:
        if w == "COPY" and not r.startswith("--from"):
            for src in shlex.split(r)[:-1]:
                assert (ROOT / src).exists(), src


@pytest.mark.slow
def test_dockerfile_install_steps_work_in_a_fresh_venv(tmp_path: Path) -> None:
    """Replay the build stage: COPY the same files, run the same RUN commands, with
    the venv path moved into the temporary directory."""
    src = tmp_path / "src"
    src.mkdir()
    venv = tmp_path / "venv"
    for w, r in dockerfile():
        if w == "FROM" and not r.endswith("AS build"):
            break  # the runtime stage only copies the venv
        if w == "COPY":
            *sources, _ = shlex.split(r)
            for s in sources:
                p = ROOT / s
                if p.is_dir():
                    ignore = shutil.ignore_patterns("__pycache__", "*.so")  # built here
                    shutil.copytree(p, src / s, ignore=ignore)
                else:
                    shutil.copy(p, src / s)
        if w == "RUN":
            cmd = r.replace("/opt/streamdedup", str(venv)).replace(
                "python -m venv", f"{sys.executable} -m venv"
            )
            res = subprocess.run(cmd, shell=True, cwd=src, capture_output=True, timeout=900)
            assert res.returncode == 0, res.stderr.decode()[-3000:]
    r = subprocess.run([venv / "bin" / "streamdedup", "worker", "--help"], capture_output=True)
    assert r.returncode == 0 and b"--bootstrap-servers" in r.stdout


# ---------------------------------------------------------------- docker compose


def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_runs_apache_kafka_in_kraft_mode() -> None:
    kafka = compose()["services"]["kafka"]
    assert kafka["image"].startswith("apache/kafka:")
    env = kafka["environment"]
    assert "controller" in env["KAFKA_PROCESS_ROLES"]
    assert "KAFKA_ZOOKEEPER_CONNECT" not in env
    assert str(env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"]) == "1"
    assert str(env["KAFKA_TRANSACTION_STATE_LOG_MIN_ISR"]) == "1"


def test_compose_services_match_the_cli() -> None:
    c = compose()
    s = c["services"]
    worker = s["worker"]
    env = worker["environment"]
    check_env("worker", env)
    check_invocation(worker["command"])
    port = env["STREAMDEDUP_METRICS_PORT"]
    assert f"{port}:{port}" in worker["ports"]
    mounts = [v.split(":") for v in worker["volumes"]]
    assert any(under(env["STREAMDEDUP_INDEX"], target) for _, target in mounts)
    assert all(name in c["volumes"] for name, _ in mounts)
    assert worker["depends_on"]["topics"]["condition"] == "service_completed_successfully"
    # the init service creates every topic the worker uses, the changelog compacted
    script = s["topics"]["command"][0]
    for var in ("INPUT_TOPIC", "OUTPUT_TOPIC", "DEAD_LETTER_TOPIC", "CHANGELOG_TOPIC"):
        assert f"--topic {env['STREAMDEDUP_' + var]} " in script, var
    changelog_line = [x for x in script.splitlines() if env["STREAMDEDUP_CHANGELOG_TOPIC"] in x]
    assert "cleanup.policy=compact" in changelog_line[0]
    # the demo producer
    producer = s["producer"]
    check_env("produce", producer["environment"])
    cmd = " ".join(producer["command"])
    invocation = shlex.split(cmd.split("| streamdedup ", 1)[1])
    check_invocation(invocation)
    assert invocation[invocation.index("--topic") + 1] == env["STREAMDEDUP_INPUT_TOPIC"]
    assert "data' / 'sample.jsonl.gz'" in cmd
    assert (ROOT / "streamdedup" / "data" / "sample.jsonl.gz").exists()


def test_monitoring_profile_scrapes_real_metrics() -> None:
    s = compose()["services"]
    for name in ("prometheus", "grafana"):
        assert s[name]["profiles"] == ["monitoring"]
        for volume in s[name]["volumes"]:
            assert (ROOT / volume.split(":")[0]).exists(), volume
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j["static_configs"][0]["targets"] for j in prom["scrape_configs"]}
    port = s["worker"]["environment"]["STREAMDEDUP_METRICS_PORT"]
    assert jobs.pop("streamdedup") == [f"worker:{port}"]
    # the "segments" profile's processes, each at its own metrics port
    scraped = {t for targets in jobs.values() for t in targets}
    served = {
        f"{name}:{svc['environment']['STREAMDEDUP_METRICS_PORT']}"
        for name, svc in s.items()
        if svc.get("profiles") == ["segments"]
    }
    assert scraped == served
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "streamdedup.json").read_text())
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            used |= set(re.findall(r"streamdedup_[a-z_]+", target["expr"]))
    assert used
    families = metric_families()
    for name in used:
        base = re.sub(r"_(total|bucket|count|sum)$", "", name)
        assert base in families, name
    assert families - {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in used} == set(), (
        "a metric the dashboard does not show"
    )


# ---------------------------------------------------------------- Kubernetes


def manifests() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def test_kubernetes_manifests_match_the_cli() -> None:
    m = manifests()
    config = m["ConfigMap/streamdedup"]["data"]
    secret = m["Secret/streamdedup"]["stringData"]
    check_env("worker", config)
    check_env("worker", secret)
    assert {"STREAMDEDUP_SASL_USERNAME", "STREAMDEDUP_SASL_PASSWORD"} <= set(secret)
    assert config["STREAMDEDUP_SECURITY_PROTOCOL"].startswith("SASL")
    sts = m["StatefulSet/streamdedup"]
    pod = sts["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    check_invocation(c["args"])
    refs = {e.get("configMapRef", e.get("secretRef"))["name"] for e in c["envFrom"]}
    assert refs == {"streamdedup"}
    port = int(config["STREAMDEDUP_METRICS_PORT"])
    (metrics_port,) = c["ports"]
    assert metrics_port == {"name": "metrics", "containerPort": port}
    assert config["STREAMDEDUP_METRICS_HOST"] == "0.0.0.0"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    mounts = {v["name"]: v["mountPath"] for v in c["volumeMounts"]}
    assert under(config["STREAMDEDUP_INDEX"], mounts["index"])
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["index"]
    assert under(config["STREAMDEDUP_SSL_CAFILE"], mounts["tls"])
    tls = {v["name"]: v for v in pod["spec"]["volumes"]}["tls"]["secret"]["secretName"]
    assert Path(config["STREAMDEDUP_SSL_CAFILE"]).name in m[f"Secret/{tls}"]["stringData"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert c["resources"]["requests"]["memory"] and c["resources"]["limits"]["memory"]
    labels = pod["metadata"]["labels"]
    for name in ("Service/streamdedup", "Service/streamdedup-metrics"):
        svc = m[name]["spec"]
        assert svc["selector"] == labels
        assert svc["ports"][0]["targetPort"] == "metrics" and svc["ports"][0]["port"] == port
    # a PodDisruptionBudget does nothing useful for a single replica (none is shipped)
    assert sts["spec"]["replicas"] > 1 or not any(k.startswith("PodDisruptionBudget/") for k in m)
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}


# ---------------------------------------------------------------- segments


SEGMENTED = DEPLOY / "k8s-segmented"
WAIT = re.compile(r"\[ -f (\S+)/manifest\.json \]")


def segment_server_invocation(script: str) -> list[str]:
    """The `streamdedup segment-server DIR ...` a wrapper script ends by exec'ing."""
    return shlex.split(script.split("exec streamdedup ", 1)[1])


def test_compose_segments_profile_matches_the_cli() -> None:
    c = compose()
    s = c["services"]
    worker, writer = s["worker"], s["segmented-worker"]
    env = writer["environment"]
    check_env("worker", env)
    check_invocation(writer["command"])
    assert writer["profiles"] == ["segments"]
    # a second writer on the same input: its own group, verdicts, index; no changelog
    assert env["STREAMDEDUP_INPUT_TOPIC"] == worker["environment"]["STREAMDEDUP_INPUT_TOPIC"]
    for var in ("GROUP_ID", "OUTPUT_TOPIC"):
        assert env[f"STREAMDEDUP_{var}"] != worker["environment"][f"STREAMDEDUP_{var}"], var
    assert "STREAMDEDUP_CHANGELOG_TOPIC" not in env  # seal refuses an index bound to one
    assert f"--topic {env['STREAMDEDUP_OUTPUT_TOPIC']} " in s["topics"]["command"][0]
    (mount,) = writer["volumes"]
    assert under(env["STREAMDEDUP_INDEX"], mount.split(":")[1])
    servers = {name: svc for name, svc in s.items() if "segment-server" in str(svc.get("command"))}
    assert len(servers) >= 2
    volumes = set()
    for name, svc in servers.items():
        assert svc["profiles"] == ["segments"], name
        check_env("segment-server", svc["environment"])
        script = svc["command"][0]
        argv = segment_server_invocation(script)
        check_invocation(argv)
        segment = argv[1]
        (waits_for,) = WAIT.findall(script)
        assert waits_for == segment, name  # it waits for the directory it then serves
        ((volume, target),) = [v.split(":") for v in svc["volumes"]]
        assert under(segment, target) and volume in c["volumes"], name
        volumes.add(volume)
        assert svc["environment"]["STREAMDEDUP_BOOTSTRAP_SERVERS"] == "kafka:9092"
    assert len(volumes) == len(servers), "one segment per volume"
    assert mount.split(":")[0] not in volumes
    host_ports = [p.split(":")[0] for svc in s.values() for p in svc.get("ports", [])]
    assert len(host_ports) == len(set(host_ports))


def overlay() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(SEGMENTED.glob("*.yaml")):
        if path.name in ("kustomization.yaml", "writer.yaml"):
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return out


def test_segmented_kubernetes_overlay_matches_the_cli() -> None:
    base, m = manifests(), overlay()
    kustomization = yaml.safe_load((SEGMENTED / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../k8s", "segments.yaml"]
    # the patch takes the changelog off the writer's ConfigMap, and only that
    (patch,) = [
        yaml.safe_load((SEGMENTED / p["path"]).read_text()) for p in kustomization["patches"]
    ]
    assert f"{patch['kind']}/{patch['metadata']['name']}" in base
    assert patch["data"] == {"STREAMDEDUP_CHANGELOG_TOPIC": None}
    assert "STREAMDEDUP_CHANGELOG_TOPIC" in base["ConfigMap/streamdedup"]["data"]
    config = m["ConfigMap/streamdedup-segments"]["data"]
    check_env("segment-server", config)
    check_env("segment-server", base["Secret/streamdedup"]["stringData"])
    sts = m["StatefulSet/streamdedup-segments"]
    pod = sts["spec"]["template"]
    (c,) = pod["spec"]["containers"]
    check_invocation(c["args"])
    segment = c["args"][1]
    refs = {e.get("configMapRef", e.get("secretRef"))["name"] for e in c["envFrom"]}
    assert refs == {"streamdedup-segments", "streamdedup"}
    mounts = {v["name"]: v["mountPath"] for v in c["volumeMounts"]}
    assert under(segment, mounts["segment"])
    assert [t["metadata"]["name"] for t in sts["spec"]["volumeClaimTemplates"]] == ["segment"]
    # the init container waits for the manifest of the directory the server is given
    (init,) = pod["spec"]["initContainers"]
    assert f'"{segment}/manifest.json"' in init["command"][-1]
    assert {v["name"]: v["mountPath"] for v in init["volumeMounts"]} == {
        "segment": mounts["segment"]
    }
    assert init["image"] == c["image"]
    port = int(config["STREAMDEDUP_METRICS_PORT"])
    assert c["ports"] == [{"name": "metrics", "containerPort": port}]
    assert config["STREAMDEDUP_METRICS_HOST"] == "0.0.0.0"
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert under(config["STREAMDEDUP_SSL_CAFILE"], mounts["tls"])
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    labels = pod["metadata"]["labels"]
    assert labels != base["StatefulSet/streamdedup"]["spec"]["template"]["metadata"]["labels"]
    assert sts["spec"]["serviceName"] == "streamdedup-segments"
    for name in ("Service/streamdedup-segments", "Service/streamdedup-segments-metrics"):
        svc = m[name]["spec"]
        assert svc["selector"] == labels
        assert svc["ports"][0]["targetPort"] == "metrics" and svc["ports"][0]["port"] == port


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_segmented_overlay_builds_with_kustomize() -> None:
    """kubectl's own kustomize builds the overlay: the base plus the segment servers,
    the writer's ConfigMap without the changelog."""
    r = subprocess.run(
        ["kubectl", "kustomize", str(SEGMENTED)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    built = {f"{d['kind']}/{d['metadata']['name']}": d for d in yaml.safe_load_all(r.stdout) if d}
    assert set(built) == set(manifests()) | set(overlay())
    writer = built["ConfigMap/streamdedup"]["data"]
    assert "STREAMDEDUP_CHANGELOG_TOPIC" not in writer
    assert {k: v for k, v in manifests()["ConfigMap/streamdedup"]["data"].items()} == {
        **writer,
        "STREAMDEDUP_CHANGELOG_TOPIC": "documents-changelog",
    }


def test_alerts_name_real_metrics() -> None:
    """deploy/prometheus/alerts.yml is loaded by Prometheus and every metric its
    expressions use exists; a stalled segment is among them."""
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert prom["rule_files"] == ["/etc/prometheus/alerts.yml"]
    mounted = dict(v.split(":")[:2] for v in compose()["services"]["prometheus"]["volumes"])
    assert mounted["./deploy/prometheus/alerts.yml"] == "/etc/prometheus/alerts.yml"
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    families = metric_families()
    alerts = [r for g in rules["groups"] for r in g["rules"]]
    assert "StreamdedupSegmentStalled" in {r["alert"] for r in alerts}
    jobs = {j["job_name"] for j in prom["scrape_configs"]}
    for rule in alerts:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["for"], rule["alert"]
        for name in re.findall(r"streamdedup_[a-z_]+", rule["expr"]):
            assert re.sub(r"_(total|bucket|count|sum)$", "", name) in families, name
        for job in re.findall(r'job="([^"]+)"', rule["expr"]):
            assert job in jobs, job
