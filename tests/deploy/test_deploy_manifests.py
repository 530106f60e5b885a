"""Structural checks of the deployment files in deploy/ (YAML, Kubernetes, compose, systemd)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
YAML_FILES = sorted(
    [*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml"), *(REPO / "dashboards").rglob("*.yaml")]
)
REQUIRED_CAPS = {"BPF", "PERFMON", "SYS_RESOURCE"}


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def _k8s_objects() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    objs: list[dict[str, Any]] = []
    for name in kustomization["resources"]:
        objs.extend(_docs(K8S / name))
    return objs


def _by_kind(kind: str) -> dict[str, Any]:
    (obj,) = [o for o in _k8s_objects() if o["kind"] == kind]
    return obj


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_yaml_file_parses(path: Path) -> None:
    """Every YAML file under deploy/ and the Grafana provisioning parses, with >=1 document."""
    assert _docs(path)


def test_kustomization_lists_every_manifest() -> None:
    """kustomization.yaml references every manifest in deploy/kubernetes/ and nothing missing."""
    listed = set(yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"])
    present = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == present


def test_kubernetes_objects_have_required_fields() -> None:
    """Each Kubernetes object has apiVersion, kind, metadata.name and (except a few) a spec."""
    objs = _k8s_objects()
    assert {o["kind"] for o in objs} >= {"DaemonSet", "Service", "ServiceMonitor"}
    for o in objs:
        assert o["apiVersion"] and o["kind"] and o["metadata"]["name"], o
        if o["kind"] not in {"Namespace", "ServiceAccount"}:
            assert isinstance(o.get("spec"), dict), o["kind"]
        if o["kind"] != "Namespace":
            assert o["metadata"]["namespace"] == "aaco", o["kind"]


def test_kubernetes_core_objects_match_the_api_schemas() -> None:
    """Core objects validate strictly against the Kubernetes 1.30 OpenAPI schemas."""
    kv = pytest.importorskip("kubernetes_validate")
    for o in _k8s_objects():
        if o["apiVersion"].startswith("monitoring.coreos.com"):
            continue  # CRD: no bundled schema
        kv.validate(o, "1.30.0", strict=True)


def test_daemonset_has_host_pid_capabilities_and_gpu_mounts() -> None:
    """The DaemonSet has hostPID, CAP_BPF/PERFMON/SYS_RESOURCE and /sys, /dev/kfd, /dev/dri."""
    ds = _by_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert (
        ds["spec"]["selector"]["matchLabels"].items()
        <= ds["spec"]["template"]["metadata"]["labels"].items()
    )
    (container,) = pod["containers"]
    caps = container["securityContext"]["capabilities"]
    assert set(caps["add"]) >= REQUIRED_CAPS
    assert caps["drop"] == ["ALL"]
    host_paths = {v["hostPath"]["path"]: v["name"] for v in pod["volumes"] if "hostPath" in v}
    assert {"/sys", "/dev/kfd", "/dev/dri"} <= set(host_paths)
    mounted = {m["name"] for m in container["volumeMounts"]}
    assert {host_paths["/sys"], host_paths["/dev/kfd"], host_paths["/dev/dri"]} <= mounted
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["metrics"] == 9464
    assert "--metrics-addr" in container["args"]


def test_daemonset_mounts_pod_resources_socket_and_log_links_read_only() -> None:
    """Pod attribution: the k8s collector is on, the kubelet pod-resources
    directory and /var/log/containers are mounted read-only, NODE_NAME comes
    from the downward API, and no ServiceAccount token is mounted (no RBAC)."""
    ds = _by_kind("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert args[args.index("--collector") + 1] == "k8s"
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    for path in ("/var/lib/kubelet/pod-resources", "/var/log/containers"):
        (name,) = [n for n, p in host_paths.items() if p == path]
        assert mounts[name]["mountPath"] == path and mounts[name]["readOnly"] is True
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert pod["automountServiceAccountToken"] is False
    (endpoint,) = _by_kind("ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True  # else pod/namespace become exported_pod/...
    assert not [d for d in _k8s_objects() if d.get("kind") in ("Role", "ClusterRole")]


def test_service_and_servicemonitor_select_the_exporter_pods() -> None:
    """The Service selects the DaemonSet's pods and the ServiceMonitor scrapes its metrics port."""
    ds, svc, sm = _by_kind("DaemonSet"), _by_kind("Service"), _by_kind("ServiceMonitor")
    pod_labels = ds["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    svc_ports = {p["name"] for p in svc["spec"]["ports"]}
    assert all(e["port"] in svc_ports for e in sm["spec"]["endpoints"])
    assert sm["spec"]["namespaceSelector"]["matchNames"] == [svc["metadata"]["namespace"]]


def test_nats_values_describe_three_node_jetstream_cluster() -> None:
    """The NATS chart values enable clustering with 3 replicas and JetStream file storage."""
    values = yaml.safe_load((DEPLOY / "nats" / "values.yaml").read_text())
    cfg = values["config"]
    assert cfg["cluster"]["enabled"] is True and cfg["cluster"]["replicas"] == 3
    assert cfg["jetstream"]["enabled"] is True
    assert cfg["jetstream"]["fileStore"]["enabled"] is True


def test_daemonset_uses_every_nats_server_and_the_chart_replica_count() -> None:
    """The DaemonSet's --nats lists as many servers as the NATS chart runs and
    --stream-replicas equals that count, so values.yaml's replica claim holds."""
    (container,) = _by_kind("DaemonSet")["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    n = yaml.safe_load((DEPLOY / "nats" / "values.yaml").read_text())["config"]["cluster"][
        "replicas"]
    servers = args[args.index("--nats") + 1].split(",")
    assert len(set(servers)) == n and all(s.startswith("nats://") for s in servers)
    assert args[args.index("--stream-replicas") + 1] == str(n)


def test_compose_stack_services_and_mounted_files_exist() -> None:
    """docker-compose defines the stack and every relative bind mount / build file exists."""
    compose_path = DEPLOY / "docker-compose.yml"
    compose = yaml.safe_load(compose_path.read_text())
    services = compose["services"]
    assert {"nats", "prometheus", "grafana", "aaco-exporter"} <= set(services)
    base = compose_path.parent
    for name, svc in services.items():
        for vol in svc.get("volumes", []):
            src = vol.split(":", 1)[0]
            if src.startswith("."):
                assert (base / src).exists(), f"{name}: {src} missing"
        if "build" in svc:
            ctx = (base / svc["build"]["context"]).resolve()
            assert (ctx / svc["build"]["dockerfile"]).is_file(), name
    assert services["aaco-exporter"]["pid"] == "host"
    assert set(services["aaco-exporter"]["cap_add"]) >= REQUIRED_CAPS
    prom_mounts = [v.split(":") for v in services["prometheus"]["volumes"]]
    assert ["./prometheus/prometheus-compose.yml", "/etc/prometheus/prometheus.yml", "ro"] in (
        prom_mounts
    )
    gpu = yaml.safe_load((DEPLOY / "docker-compose.gpu.yml").read_text())
    devices = gpu["services"]["aaco-exporter"]["devices"]
    assert any(d.startswith("/dev/kfd") for d in devices)
    assert any(d.startswith("/dev/dri") for d in devices)


def test_compose_grafana_mounts_match_provisioning_path() -> None:
    """Grafana's dashboard provider path is where compose mounts dashboards/grafana."""
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    targets = [v.split(":")[1] for v in compose["services"]["grafana"]["volumes"]]
    provider = yaml.safe_load(
        (REPO / "dashboards/grafana/provisioning/dashboards/aaco.yaml").read_text()
    )["providers"][0]
    assert provider["options"]["path"] in targets


def test_dockerfile_uses_rocm_base_and_exposes_metrics_port() -> None:
    """The Dockerfile builds on a ROCm image, exposes 9464 and runs aaco-exporter."""
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    assert re.search(r"^ARG BASE_IMAGE=rocm/", text, re.M)
    assert re.search(r"^FROM \$\{BASE_IMAGE\}", text, re.M)
    assert re.search(r"^EXPOSE 9464$", text, re.M)
    assert 'ENTRYPOINT ["aaco-exporter"]' in text
    for copied in re.findall(r"^COPY (\S+)", text, re.M):
        assert (REPO / copied).exists() or copied in {"README.md"}, copied


def _unit() -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for line in (DEPLOY / "systemd" / "aaco-exporter.service").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "[")):
            continue
        key, _, value = line.partition("=")
        entries.setdefault(key, []).append(value)
    return entries


def test_systemd_unit_grants_ebpf_capabilities_and_runs_daemon() -> None:
    """The unit runs `aaco-exporter run --metrics-addr` with CAP_BPF/PERFMON/SYS_RESOURCE."""
    unit = _unit()
    (exec_start,) = unit["ExecStart"]
    assert " run --metrics-addr " in exec_start
    want = {f"CAP_{c}" for c in REQUIRED_CAPS}
    assert want <= set(unit["AmbientCapabilities"][0].split())
    assert set(unit["AmbientCapabilities"][0].split()) <= set(
        unit["CapabilityBoundingSet"][0].split()
    )
    assert unit["NoNewPrivileges"] == ["yes"]
    assert "/dev/kfd rw" in unit["DeviceAllow"]
    assert "bpf" in unit["SystemCallFilter"][0].split()


def test_systemd_analyze_verify_accepts_unit() -> None:
    """systemd-analyze verify reports nothing but the not-yet-installed ExecStart binary."""
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze not installed")
    proc = subprocess.run(
        [exe, "verify", str(DEPLOY / "systemd" / "aaco-exporter.service")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    problems = [
        line
        for line in (proc.stdout + proc.stderr).splitlines()
        if line.strip() and "is not executable" not in line
    ]
    assert problems == []
