"""How evenly HAProxy's consistent hash spreads API keys over replicas: the imbalance h of
the capacity formula (docs/deploy.md), measured on the real ring.

    python -m bench.ring                          # 2, 3, 4, 8 replicas; 10-100 developers
    python -m bench.ring --replicas 3 --developers 25 --draws 50

HAProxy runs with the hash settings of deploy/haproxy.cfg in front of stand-in replicas
(threads of this process on 127.0.0.1 that answer with their name). For each draw, N random
keys of the usual shape (`sk-` + 32 hex digits) are sent once each, and h = the busiest
replica's keys over the mean, N / R. Printed per (R, N): the mean and the 90th percentile of h
over the draws (also in bench/results/ring-haproxy.md). Needs `haproxy` on the PATH (or in /usr/sbin). No model.
"""

from __future__ import annotations

import argparse
import http.server
import re
import secrets
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from lookahead.server.background import free_port

CFG = Path(__file__).resolve().parent.parent / "deploy" / "haproxy.cfg"


def _stand_in(name: str) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.send_header("X-Lookahead-Replica", name)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def config(port: int, ports: list[int]) -> str:
    """The shipped configuration with these stand-ins as its servers (ids 1..R)."""
    text = re.sub(r"^\s*server .*\n", "", CFG.read_text(), flags=re.M)
    text = text.replace("bind :8080", f"bind 127.0.0.1:{port}").replace("bind :8404", f"bind 127.0.0.1:{free_port()}")
    lines = "".join(f"    server lookahead-{i + 1} 127.0.0.1:{p} id {i + 1}\n" for i, p in enumerate(ports))
    return text.rstrip("\n") + "\n" + lines


def measure(replicas: int, developers: list[int], draws: int, haproxy: str) -> dict[int, list[float]]:
    stand_ins = [_stand_in(f"lookahead-{i + 1}") for i in range(replicas)]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "haproxy.cfg"
        cfg.write_text(config(port, [s.server_address[1] for s in stand_ins]))
        proc = subprocess.Popen([haproxy, "-db", "-q", "-f", str(cfg)], stdout=subprocess.DEVNULL)
        try:
            url = f"http://127.0.0.1:{port}/"
            with httpx.Client(timeout=5) as client:
                deadline = time.monotonic() + 10
                while True:
                    try:
                        client.get(url)
                        break
                    except httpx.TransportError:
                        assert time.monotonic() < deadline, "haproxy did not start"
                        time.sleep(0.05)
                out: dict[int, list[float]] = {}
                for n in developers:
                    out[n] = []
                    for _ in range(draws):
                        keys = ["sk-" + secrets.token_hex(16) for _ in range(n)]
                        owners = Counter(
                            client.get(url, headers={"Authorization": f"Bearer {k}"}).headers["X-Lookahead-Replica"]
                            for k in keys
                        )
                        out[n].append(max(owners.values()) / (n / replicas))
                return out
        finally:
            proc.terminate()
            proc.wait(10)
            for s in stand_ins:
                s.shutdown()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", default="2,3,4,8")
    ap.add_argument("--developers", default="10,25,50,100")
    ap.add_argument("--draws", type=int, default=30)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ring-haproxy.md")
    args = ap.parse_args(argv)
    haproxy = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if haproxy is None:
        raise SystemExit("error: haproxy is not installed (apt-get install haproxy)")
    version = subprocess.run([haproxy, "-v"], capture_output=True, text=True).stdout.split("\n")[0]
    lines = [f"# Keys per replica on HAProxy's consistent hash ({version.strip()})", "",
             f"h: the busiest replica's keys over the mean, over {args.draws} draws of random keys.", "",
             "| replicas | developers | h mean | h p90 |", "| --- | --- | --- | --- |"]
    print("\n".join(lines), flush=True)
    for r in (int(x) for x in args.replicas.split(",")):
        for n, hs in measure(r, [int(x) for x in args.developers.split(",")], args.draws, haproxy).items():
            p90 = statistics.quantiles(hs, n=10)[-1] if len(hs) > 1 else hs[0]
            lines.append(f"| {r} | {n} | {statistics.mean(hs):.2f} | {p90:.2f} |")
            print(lines[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
