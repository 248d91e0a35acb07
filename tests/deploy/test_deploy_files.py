"""deploy/: the files are checked against their schemas and linters, and what they start is run for real (the
entrypoint and the systemd ExecStart line, each stopped with SIGTERM). No Docker engine runs here (docs/deploy.md)."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from kbroker import config
from kbroker.commands.healthcheck import api_versions_error
from kbroker.testing import free_port

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
VENV_BIN = Path(sys.executable).parent
KBROKER = shutil.which("kbroker", path=str(VENV_BIN)) or "kbroker"
COMPOSE_FILES = sorted((DEPLOY / "compose").glob("*.yaml"))
KUBERNETES_FILES = sorted((DEPLOY / "kubernetes").glob("*.yaml"))
UNIT = DEPLOY / "systemd" / "kbroker.service"


def _tool(name: str) -> str:
    return str(VENV_BIN / name)


def _kbroker_environments() -> Iterator[tuple[str, dict[str, str]]]:
    """Every set of KBROKER_* variables a compose service or a Kubernetes container passes."""
    for path in COMPOSE_FILES:
        for name, service in yaml.safe_load(path.read_text())["services"].items():
            if "kbroker" in service.get("image", ""):
                yield f"{path.name}:{name}", dict(service["environment"])
    for path in KUBERNETES_FILES:
        for document in yaml.safe_load_all(path.read_text()):
            if document["kind"] == "StatefulSet":
                for container in document["spec"]["template"]["spec"]["containers"]:
                    if container["image"].startswith("kbroker"):
                        yield f"{path.name}:{container['name']}", {e["name"]: e["value"] for e in container["env"]}


ENVIRONMENTS = dict(_kbroker_environments())


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run([_tool("hadolint"), str(DEPLOY / "Dockerfile")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_runs_as_non_root_under_tini_with_a_data_volume_and_healthcheck() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert re.search(r"^USER 1000:1000$", text, re.M)
    assert 'VOLUME ["/var/lib/kbroker/data"]' in text
    assert re.search(r'^ENTRYPOINT \["/usr/bin/tini", "--", ', text, re.M)
    assert '"kbroker", "healthcheck"' in text


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_file_matches_the_compose_spec(path: Path) -> None:
    result = subprocess.run([_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cluster_compose_has_three_brokers_with_distinct_ids_and_zookeeper() -> None:
    services = yaml.safe_load((DEPLOY / "compose" / "cluster.yaml").read_text())["services"]
    ids = {s["environment"]["KBROKER_BROKER_ID"] for n, s in services.items() if n.startswith("kbroker")}
    assert ids == {"1", "2", "3"}
    assert services["zookeeper"]["image"].startswith("zookeeper:")


@pytest.mark.parametrize("path", KUBERNETES_FILES, ids=lambda p: p.name)
def test_kubernetes_manifest_matches_the_kubernetes_schemas(path: Path) -> None:
    result = subprocess.run([_tool("kubernetes-validate"), "--strict", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_kubernetes_manifest_has_statefulset_headless_service_and_pdb() -> None:
    kinds = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "kubernetes" / "kbroker.yaml").read_text())}
    assert kinds["Service"]["spec"]["clusterIP"] == "None"
    assert kinds["StatefulSet"]["spec"]["serviceName"] == kinds["Service"]["metadata"]["name"]
    assert kinds["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert kinds["StatefulSet"]["spec"]["volumeClaimTemplates"]


@pytest.mark.parametrize("where", ENVIRONMENTS)
def test_every_kbroker_variable_in_the_files_names_a_property_kbroker_reads(where: str) -> None:
    variables = {k for k in ENVIRONMENTS[where] if k.startswith("KBROKER_")} - {
        "KBROKER_POD_ORDINAL_FROM_HOSTNAME", "KBROKER_HEADLESS_SERVICE", "KBROKER_ADVERTISED_PORT"}  # entrypoint's
    taken = config.environment_overrides({k: ENVIRONMENTS[where][k] for k in variables})
    assert len(taken) == len(variables), f"ignored: {variables - {'KBROKER_' + k.upper() for k in taken}}"
    config.load(environ=ENVIRONMENTS[where])  # and their values are valid


def _entrypoint(environ: dict[str, str], *args: str) -> list[str]:
    """The command line deploy/entrypoint.sh ends up exec-ing (KBROKER_BIN=echo prints it)."""
    result = subprocess.run(["sh", str(DEPLOY / "entrypoint.sh"), *args], capture_output=True, text=True,
                            env={"PATH": os.environ["PATH"], "KBROKER_BIN": "echo", **environ}, check=True)
    return shlex.split(result.stdout)


def test_entrypoint_takes_the_broker_id_from_the_pod_ordinal() -> None:
    command = _entrypoint({"HOSTNAME": "kbroker-2", "KBROKER_POD_ORDINAL_FROM_HOSTNAME": "1",
                           "KBROKER_CONFIG": "/nonexistent"})
    assert command == ["serve", "--override", "broker.id=2"]


def test_entrypoint_advertises_the_pods_stable_dns_name() -> None:
    command = _entrypoint({"HOSTNAME": "kbroker-12", "KBROKER_POD_ORDINAL_FROM_HOSTNAME": "1",
                           "KBROKER_HEADLESS_SERVICE": "kbroker", "KBROKER_CONFIG": "/nonexistent"})
    assert "advertised.listeners=PLAINTEXT://kbroker-12.kbroker:9092" in command
    assert "broker.id=12" in command


def test_entrypoint_refuses_a_hostname_without_an_ordinal() -> None:
    result = subprocess.run(["sh", str(DEPLOY / "entrypoint.sh")], capture_output=True, text=True,
                            env={"PATH": os.environ["PATH"], "KBROKER_BIN": "echo", "HOSTNAME": "kbroker",
                                 "KBROKER_POD_ORDINAL_FROM_HOSTNAME": "1"})
    assert result.returncode == 2


def test_entrypoint_reads_a_mounted_properties_file(tmp_path: Path) -> None:
    properties = tmp_path / "server.properties"
    properties.write_text("broker.id=0\n")
    assert _entrypoint({"KBROKER_CONFIG": str(properties)}) == ["serve", "--config", str(properties)]


def _wait_healthy(port: int, process: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        try:
            if api_versions_error(f"127.0.0.1:{port}", 1) == 0:
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError("kbroker did not become healthy")


def _stop_with_sigterm(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=30)


def _single_node_environment(tmp_path: Path) -> tuple[int, dict[str, str]]:
    """single-node.yaml's settings, with only its port and host path swapped for a free port and tmp_path."""
    port = free_port()
    environ = dict(ENVIRONMENTS["single-node.yaml:kbroker"])
    environ["KBROKER_LISTENERS"] = environ["KBROKER_LISTENERS"].replace("0.0.0.0:9092", f"127.0.0.1:{port}")
    environ["KBROKER_ADVERTISED_LISTENERS"] = environ["KBROKER_ADVERTISED_LISTENERS"].replace(
        "localhost:9092", f"127.0.0.1:{port}")
    environ["KBROKER_LOG_DIRS"] = str(tmp_path / "data")
    return port, environ


def test_entrypoint_runs_kbroker_with_the_single_node_compose_settings_and_sigterm_exits_0(tmp_path: Path) -> None:
    port, environ = _single_node_environment(tmp_path)
    properties = tmp_path / "server.properties"
    properties.write_text((DEPLOY / "server.properties").read_text())
    process = subprocess.Popen(["sh", str(DEPLOY / "entrypoint.sh")],
                               env={"PATH": os.environ["PATH"], "KBROKER_BIN": KBROKER,
                                    "KBROKER_CONFIG": str(properties), **environ}, start_new_session=True)
    try:
        _wait_healthy(port, process)
        assert (tmp_path / "data" / "meta.properties").exists()
        assert _stop_with_sigterm(process) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever the script started, even if it forgot to exec


def _unit_with_this_kbroker(tmp_path: Path) -> Path:
    unit = tmp_path / "kbroker.service"
    unit.write_text(UNIT.read_text().replace("/opt/kbroker/venv/bin/kbroker", KBROKER))
    return unit


def test_systemd_unit_verifies(tmp_path: Path) -> None:
    result = subprocess.run(["systemd-analyze", "verify", str(_unit_with_this_kbroker(tmp_path))],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_systemd_unit_is_rated_ok_or_better_by_systemd_security(tmp_path: Path) -> None:
    result = subprocess.run(["systemd-analyze", "security", "--offline=true", "--threshold=20",
                             str(_unit_with_this_kbroker(tmp_path))], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_systemd_exec_start_runs_kbroker_and_sigterm_exits_0(tmp_path: Path) -> None:
    exec_start = next(line for line in UNIT.read_text().splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(exec_start.removeprefix("ExecStart="))
    properties = tmp_path / "server.properties"
    port = free_port()
    properties.write_text(f"listeners=PLAINTEXT://127.0.0.1:{port}\n")
    argv = [KBROKER if a == "/opt/kbroker/venv/bin/kbroker" else str(properties) if a.startswith("/etc/") else a
            for a in argv]
    unit_environment = re.findall(r"^Environment=(\w+)=(.*)$", UNIT.read_text(), re.M)
    environ = {"PATH": os.environ["PATH"], **dict(unit_environment), "KBROKER_LOG_DIRS": str(tmp_path / "data")}
    process = subprocess.Popen(argv, env=environ)
    try:
        _wait_healthy(port, process)
        assert _stop_with_sigterm(process) == 0
    finally:
        process.kill()
