"""Three replicas on the small model behind a real HAProxy (the shipped deploy/haproxy.cfg on
127.0.0.1 ports): a tenant stays on one replica, tenants spread, a replica's death loses no
request that had not started streaming and moves its tenants, a restarted replica is warm
again from its --index-file, and a draining replica hands over without client retries.

Skipped where `haproxy` is not installed (CI installs it from the system's packages)."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lookahead.server.memory import partition_of
from lookahead.server.replica import REPLICA_HEADER
from tests.replicas import HAPROXY, Cluster, auth, start_cluster, stop_cluster

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)"),
]

KEYS = [f"tenant-{i}" for i in range(9)]
EDIT_KEY = "tenant-edits"
# greedy, the small model counts on and on: a stream that outlasts the test's actions
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8,"
CODE = (
    "def scale(values, factor):\n    result = []\n    for v in values:\n"
    "        result.append(v * factor)\n    return result\n"
)
EDIT = {
    "prompt": "# Rename `values` to `items` in this function.\n" + CODE + "\n# The same function, with `items`:\n",
    "max_tokens": 48,
    "temperature": 0,
}


@pytest.fixture(scope="module")
def cluster(smol_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    running = start_cluster(smol_path, tmp_path_factory.mktemp("replicas"), [*KEYS, EDIT_KEY])
    try:
        yield running
    finally:
        stop_cluster(running)


def _all_up(cluster: Cluster) -> None:
    """Bring back any replica an earlier test left dead, so each test starts from three."""
    for r in cluster.replicas.values():
        if not r.alive:
            r.start()
            r.wait_healthy()
    time.sleep(0.5)  # a few health checks: HAProxy puts them back in rotation


def test_one_key_stays_on_one_replica_and_keys_spread(cluster: Cluster) -> None:
    _all_up(cluster)
    for key in KEYS:
        seen = {cluster.replica_of(key) for _ in range(3)}
        assert len(seen) == 1, (key, seen)
        cluster.owners[key] = seen.pop()
    assert len(set(cluster.owners.values())) >= 2, cluster.owners


def test_a_replica_killed_mid_run_loses_no_waiting_request(cluster: Cluster) -> None:
    _all_up(cluster)
    owners = {key: cluster.replica_of(key) for key in KEYS}
    victim = owners[KEYS[0]]
    victim_keys = [k for k in KEYS if owners[k] == victim]
    replica = cluster.replicas[victim]
    results: list[tuple[int, str, int]] = []

    def waiting_request(key: str) -> None:
        r, retries = cluster.post(key, {"prompt": "def add(a, b):", "max_tokens": 4})
        results.append((r.status_code, r.headers.get(REPLICA_HEADER, ""), retries))

    body = {"prompt": COUNTING, "max_tokens": 300, "stream": True, "temperature": 0,
            "lookahead": {"enabled": False}}
    chunks, done, error = 0, False, None
    client = httpx.Client(timeout=httpx.Timeout(30, connect=5))
    with client, client.stream("POST", cluster.url + "/v1/completions", json=body, headers=auth(KEYS[0])) as stream:
        assert stream.status_code == 200 and stream.headers[REPLICA_HEADER] == victim
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data:"):
                chunks += 1
                break  # the first token arrived while the rest is still being written
        threads = [threading.Thread(target=waiting_request, args=(k,)) for k in victim_keys * 3][:3]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while replica.queue_depth() < len(threads):  # all three wait behind the stream
            assert time.monotonic() < deadline, "the requests never reached the replica"
            time.sleep(0.05)
        t0 = time.monotonic()
        replica.kill()
        try:
            for line in lines:
                chunks += line.startswith("data:")
                done = done or line == "data: [DONE]"
        except httpx.TransportError as exc:
            error = exc
        ended_after = time.monotonic() - t0
    for t in threads:
        t.join(90)
    # the running stream ends with an error the client sees at once, not a hang
    assert error is not None and not done and ended_after < 10, (error, done, ended_after)
    # the waiting requests, which had not started, are all answered by other replicas: HAProxy
    # does not resend a request the dead replica had received (it may have killed it), so they
    # come back as 502, and the client's one retry lands on another replica
    assert len(results) == 3 and all(code == 200 and who != victim for code, who, _ in results), results
    assert all(retries <= 1 for *_, retries in results), results
    # the dead replica's tenants are served elsewhere, each on one new replica
    for key in victim_keys:
        homes = {cluster.replica_of(key) for _ in range(2)}
        assert len(homes) == 1 and victim not in homes, (key, homes)


def _edit(cluster: Cluster) -> tuple[str, int, str]:
    r, _ = cluster.post(EDIT_KEY, EDIT)
    assert r.status_code == 200, r.text
    body = r.json()
    return r.headers[REPLICA_HEADER], body["lookahead"]["accepted"], body["choices"][0]["text"]


def _saved_docs(path: Path, key: str) -> int:
    """Documents of `key` in an index file (its partition is named with the server's secret)."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        secret = path.with_name(path.name + ".secret").read_bytes()
    except (OSError, ValueError):
        return 0
    return len(data["partitions"].get(partition_of(key, secret), []))


def _wait_saved(path: Path, docs: int) -> None:
    deadline = time.monotonic() + 20
    while _saved_docs(path, EDIT_KEY) < docs:  # rebuilt, then saved, after each request
        assert time.monotonic() < deadline, "the index was never saved"
        time.sleep(0.1)


def test_a_restarted_replica_is_warm_again_from_its_index_file(cluster: Cluster) -> None:
    _all_up(cluster)
    home, cold, text = _edit(cluster)
    replica = cluster.replicas[home]
    _wait_saved(replica.index_file, 1)  # the index takes in a request just after it ends
    again, warm, text2 = _edit(cluster)
    assert again == home and text2 == text
    assert warm > cold + 10, (cold, warm)  # the repeated edit drafts from the first
    _wait_saved(replica.index_file, 2)
    replica.kill()
    elsewhere, moved, _ = _edit(cluster)  # served by the next replica, which never saw it
    assert elsewhere != home and moved < warm, (elsewhere, moved, warm)
    replica.start()
    replica.wait_healthy()
    cluster.wait_until_served_by(EDIT_KEY, home)
    back, restarted, text3 = _edit(cluster)
    assert back == home and text3 == text
    assert restarted > cold + 10 and restarted >= 0.75 * warm, (cold, warm, moved, restarted)


def test_a_draining_replica_hands_its_tenants_over_without_client_retries(cluster: Cluster) -> None:
    _all_up(cluster)
    owners = {key: cluster.replica_of(key) for key in KEYS}
    name = owners[KEYS[-1]]
    keys = [k for k in KEYS if owners[k] == name]
    replica = cluster.replicas[name]
    body = {"prompt": COUNTING, "max_tokens": 80, "stream": True, "temperature": 0,
            "lookahead": {"enabled": False}}
    events: list[str] = []
    answers: list[tuple[int, str, int]] = []
    client = httpx.Client(timeout=60)
    with client, client.stream("POST", cluster.url + "/v1/completions", json=body, headers=auth(keys[0])) as stream:
        assert stream.headers[REPLICA_HEADER] == name
        lines = stream.iter_lines()
        for line in lines:
            if line.startswith("data:"):
                events.append(line)
                break
        assert replica.proc is not None
        replica.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        for key in keys:  # turned away by the replica, sent again by HAProxy
            r, retries = cluster.post(key, {"prompt": "hi", "max_tokens": 2}, retries=0)
            answers.append((r.status_code, r.headers.get(REPLICA_HEADER, ""), retries))
        events += [line for line in lines if line.startswith("data:")]
    assert replica.proc.wait(45) == 0
    assert all(code == 200 and who != name for code, who, _ in answers), answers
    assert events[-1] == "data: [DONE]"  # the running stream finished on the draining replica
    last = json.loads(events[-2][5:])
    assert last.get("choices", [{}])[0].get("finish_reason") in ("length", "stop"), events[-3:]
