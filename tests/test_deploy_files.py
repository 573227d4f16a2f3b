"""The deployment files agree with each other and with the code, read as text (no container
runtime or cluster needed): image name, port, probes, replica names, grace periods, and every
`lookahead serve` flag they pass; and they are safe to run as shipped: no request is replayed
after it may have killed a replica, every replica restarts by itself, secrets stay off command
lines, operator pages listen on loopback, and the pods run without privileges."""

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
    return {name: s for name, s in services.items() if image_name(s.get("image", "")) == IMAGE}


def image_name(image: str) -> str:
    """`lookahead` of `lookahead:0.1.0` (a registry's `host:port/` prefix kept apart)."""
    last = image.rsplit("/", 1)[-1]
    return image[: len(image) - len(last)] + last.split(":", 1)[0].split("@", 1)[0]


def pod_spec() -> Any:
    return manifests()["Deployment"]["spec"]["template"]["spec"]


def compose_args() -> list[str]:
    return [a for s in replicas().values() for a in s["command"]]


def k8s_args() -> list[str]:
    return list(pod_spec()["containers"][0]["args"])


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
    assert image_name(container["image"]) == IMAGE and container["command"] == ["lookahead"] and args[0] == "serve"
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
    passed = [a for a in compose_args() + k8s_args() if a.startswith("--")]
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


# --- safe as shipped ---------------------------------------------------------------------------

# HAProxy's retry-on keywords that resend a request a replica has already received (it may
# have died of it, and would kill the next one too)
REPLAYS_RECEIVED = {"empty-response", "junk-response", "response-timeout", "all-retryable-errors",
                    "0rtt-rejected", "500", "501", "502", "504"}


def test_a_request_that_killed_a_replica_is_not_replayed_to_the_next() -> None:
    text = (DEPLOY / "haproxy.cfg").read_text()
    (retry_on,) = re.findall(r"^\s*retry-on\s+(.+)$", text, re.M)
    kinds = set(retry_on.split("#")[0].split())
    assert "conn-failure" in kinds, "a request that never reached a replica is sent to another"
    assert not kinds & REPLAYS_RECEIVED, kinds & REPLAYS_RECEIVED
    # 503 is the draining replica's answer, given before any work: safe to send elsewhere
    assert kinds <= {"conn-failure", "503"}, kinds
    annotations = manifests()["Ingress"]["metadata"]["annotations"]
    next_upstream = annotations["nginx.ingress.kubernetes.io/proxy-next-upstream"].split()
    assert "non_idempotent" not in next_upstream, "nginx would resend a POST a pod had received"
    assert not {"invalid_header", "http_500", "http_502", "http_504"} & set(next_upstream), next_upstream


def test_every_replica_restarts_by_itself_after_a_crash() -> None:
    for name, service in load("docker-compose.yml")["services"].items():
        assert service.get("restart") in ("always", "unless-stopped", "on-failure"), name
    pod = pod_spec()
    assert pod.get("restartPolicy", "Always") == "Always"
    (container,) = pod["containers"]
    assert "livenessProbe" in container, "a replica that stops answering is restarted"
    for unit in DEPLOY.rglob("*.service"):  # systemd units, if any are shipped
        restart = re.search(r"^Restart=(\S+)", unit.read_text(), re.M)
        assert restart and restart[1] in ("always", "on-failure", "on-abnormal"), unit


def test_operator_pages_listen_on_loopback_only() -> None:
    """Only the API is published on every interface: HAProxy's stats and Prometheus, which
    have no authentication, listen on the host's loopback."""
    for name, service in load("docker-compose.yml")["services"].items():
        for port in service.get("ports", []):
            published = str(port)
            if published == f"{PORT}:{PORT}" and name == "lb":
                continue
            assert published.startswith("127.0.0.1:"), (name, published)
    assert "127.0.0.1:8404:8404" in load("docker-compose.yml")["services"]["lb"]["ports"]


@pytest.mark.parametrize("where", ["compose", "kubernetes"])
def test_no_secret_is_passed_on_a_command_line(where: str) -> None:
    """`ps` and `docker inspect` show a process's arguments: keys are read from files."""
    args = compose_args() if where == "compose" else k8s_args()
    for secret_flag in ("--api-key", "--metrics-key"):
        assert secret_flag not in args, secret_flag
    assert not [a for a in args if "$" in a], "no variable expands into an argument"
    assert "--api-key-file" in args and "--metrics-key-file" in args
    if where == "compose":
        service = next(iter(replicas().values()))
        assert {"api-keys", "metrics-key"} <= set(service["secrets"])
        defined = load("docker-compose.yml")["secrets"]
        assert all("file" in defined[s] for s in service["secrets"]), "secrets from files"
        assert all("environment" not in s for s in replicas().values())
    else:
        container = pod_spec()["containers"][0]
        mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
        for path in (flag(args, "--api-key-file"), flag(args, "--metrics-key-file")):
            mount = mounts[str(Path(path).parent)]
            assert mount.get("readOnly") is True
            (volume,) = [v for v in pod_spec()["volumes"] if v["name"] == mount["name"]]
            assert "secret" in volume


def test_images_are_pinned_to_a_tag() -> None:
    images = [s["image"] for s in load("docker-compose.yml")["services"].values()]
    images.append(pod_spec()["containers"][0]["image"])
    for image in images:
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        assert tag and tag != "latest", image
    ours = {s["image"] for s in replicas().values()} | {pod_spec()["containers"][0]["image"]}
    assert len(ours) == 1, "compose and Kubernetes run the same build"


def test_pods_run_without_privileges_on_a_read_only_root() -> None:
    pod = pod_spec()
    (container,) = pod["containers"]
    context = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
    assert context["runAsNonRoot"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"]["drop"] == ["ALL"] and not context["capabilities"].get("add")
    # the service writes its index, its model cache (the image's XDG_CACHE_HOME) and
    # temporary files: each on a writable volume
    writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    dockerfile = (ROOT / "Dockerfile").read_text() if (ROOT / "Dockerfile").exists() else "XDG_CACHE_HOME=/cache"
    cache = re.search(r"XDG_CACHE_HOME=(\S+)", dockerfile)
    assert cache is not None
    for path in (str(Path(flag(k8s_args(), "--index-file")).parent), cache[1], "/tmp"):
        assert path in writable, path


def test_probes_tolerate_a_busy_second() -> None:
    (container,) = pod_spec()["containers"]
    for probe in ("readinessProbe", "livenessProbe"):
        spec = container[probe]
        assert spec.get("timeoutSeconds", 1) >= 3, probe
        assert spec.get("failureThreshold", 3) >= 3, probe
