"""The deployment files agree with each other and with the code, read as text (no container
runtime or cluster needed): image name, port, probes, replica names, grace periods, and every
`lookahead serve` flag they pass."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.testclient import TestClient
from typer.testing import CliRunner

from lookahead.cli.main import app
from lookahead.errors import LookaheadError
from lookahead.server import ServeConfig, create_app

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
IMAGE = "lookahead"
PORT = 8000


def load(name: str) -> Any:
    return yaml.safe_load((DEPLOY / name).read_text())


def manifests() -> dict[str, Any]:
    docs: dict[str, Any] = {}
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and "kind" in doc:
                docs[doc["kind"]] = doc
    return docs


def flag(args: list[str], name: str) -> str:
    assert name in args, (name, args)
    return args[args.index(name) + 1]


def replicas() -> dict[str, Any]:
    services = load("docker-compose.yml")["services"]
    return {name: s for name, s in services.items() if s.get("image") == IMAGE}


def haproxy_servers() -> list[tuple[str, str, int]]:
    text = (DEPLOY / "haproxy.cfg").read_text()
    return [(m[1], m[2], int(m[3])) for m in re.finditer(r"^\s*server (\S+) ([^\s:]+):(\d+)", text, re.M)]


def test_compose_runs_the_image_on_the_port_with_one_volume_per_replica() -> None:
    found = replicas()
    assert len(found) >= 2
    volumes = set()
    for name, service in found.items():
        args = service["command"]
        assert service["entrypoint"] == ["lookahead"] and args[0] == "serve"
        assert flag(args, "--port") == str(PORT) and flag(args, "--host") == "0.0.0.0"
        assert service["hostname"] == name  # the replica id (--replica-id defaults to it)
        index_dir = str(Path(flag(args, "--index-file")).parent)
        (volume,) = [v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == index_dir]
        volumes.add(volume)
        grace = float(flag(args, "--grace-period"))
        assert grace < float(service["stop_grace_period"].rstrip("s")), "the drain must end before SIGKILL"
    assert len(volumes) == len(found), "each replica keeps its index on its own volume"


def test_haproxy_and_prometheus_name_every_replica_of_the_compose_file() -> None:
    names = set(replicas())
    servers = haproxy_servers()
    assert set(servers) == {(n, n, PORT) for n in names}
    jobs = load("prometheus.yml")["scrape_configs"]
    targets = {t for job in jobs for c in job["static_configs"] for t in c["targets"]}
    assert {f"{n}:{PORT}" for n in names} <= targets
    text = (DEPLOY / "haproxy.cfg").read_text()
    for line in ("balance hdr(Authorization)", "hash-type consistent", "option httpchk GET /health",
                 "http-check disable-on-404", "bind :8000"):
        assert line in text, line
    services = load("docker-compose.yml")["services"]
    assert f"{PORT}:{PORT}" in services["lb"]["ports"]


def test_kubernetes_runs_the_image_on_the_port_with_both_probes() -> None:
    docs = manifests()
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    args = container["args"]
    assert container["image"] == IMAGE and container["command"] == ["lookahead"] and args[0] == "serve"
    assert flag(args, "--port") == str(PORT) and flag(args, "--host") == "0.0.0.0"
    assert float(flag(args, "--grace-period")) < pod["terminationGracePeriodSeconds"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": PORT}
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    index_dir = str(Path(flag(args, "--index-file")).parent)
    assert index_dir in {m["mountPath"] for m in container["volumeMounts"]}
    (svc_port,) = docs["Service"]["spec"]["ports"]
    assert svc_port["targetPort"] in ports and svc_port["port"] == PORT
    assert docs["Service"]["spec"]["selector"] == docs["Deployment"]["spec"]["selector"]["matchLabels"]
    ingress = docs["Ingress"]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"] == "$http_authorization"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": docs["Service"]["metadata"]["name"], "port": {"number": PORT}}


def test_the_probes_are_routes_of_the_service() -> None:
    def never() -> Any:
        raise LookaheadError("not loaded in this test")

    client = TestClient(create_app(ServeConfig(model_id="m"), never))  # no lifespan: never loads
    assert client.get("/health").status_code == 503  # not ready: the model is not loaded
    assert client.get("/livez").status_code == 200
    assert client.get("/metrics").status_code == 200
    assert client.get("/no-such-probe").status_code == 404


def test_every_flag_the_files_pass_is_a_flag_of_lookahead_serve() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    passed = [a for s in replicas().values() for a in s["command"] if a.startswith("--")]
    passed += [a for a in manifests()["Deployment"]["spec"]["template"]["spec"]["containers"][0]["args"]
               if a.startswith("--")]
    help_text = re.sub(r"\x1b\[[0-9;]*m", "", result.output)
    for name in set(passed):
        assert name in help_text, name


@pytest.mark.parametrize("name", ["Dockerfile", "README.md"])
def test_the_image_and_port_match_the_projects_own_files(name: str) -> None:
    path = ROOT / name
    text = path.read_text() if path.exists() else ""
    if name == "Dockerfile":
        if not text:
            pytest.skip("no Dockerfile in this checkout")
        assert re.search(rf"^EXPOSE\s+{PORT}\b", text, re.M), "the image listens where the files send traffic"
    elif "docker build" in text or "docker run" in text:
        assert re.search(rf"docker build[^\n]*-t {IMAGE}\b", text), "the README builds the image the files run"
        assert f"{PORT}" in text
    else:
        pytest.skip("the README does not build an image")
