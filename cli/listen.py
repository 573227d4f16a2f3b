"""The addresses `lookahead serve` listens on: `--host` may name several, comma-separated
(`127.0.0.1,::1`), as llama-server's does; uvicorn then serves sockets bound here."""

from __future__ import annotations

import socket

from lookahead.errors import ConfigError, UserError


def split_hosts(host: str) -> list[str]:
    """The addresses in `--host` (one, or several comma-separated)."""
    hosts = [h.strip() for h in host.split(",") if h.strip()]
    if not hosts:
        raise ConfigError("--host is empty")
    return list(dict.fromkeys(hosts))


def bind(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (not yet listening); UserError with one line if not."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise UserError(f"cannot resolve --host {host}: {exc}") from exc
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)  # ::1 beside 127.0.0.1
    try:
        sock.bind(addr)
    except OSError as exc:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def bind_all(hosts: list[str], port: int) -> list[socket.socket]:
    """Sockets bound to every host (all or none: the ones bound are closed on a failure)."""
    socks: list[socket.socket] = []
    try:
        for host in hosts:
            socks.append(bind(host, port))
    except UserError:
        for sock in socks:
            sock.close()
        raise
    return socks
