"""Which web pages may drive the service. A model server on a developer's machine is reachable
from every page that developer opens: by default only pages on this machine may call it, a
page elsewhere cannot make it work (a POST from it is a 403 before any route runs, preflight
or not), and no origin allowed by `*` is ever given credentials. Fast: the app is never
loaded (a request that gets past CORS meets the 503 of a model still loading)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient
from typer.testing import CliRunner

import lookahead.cli.serve_cmd
from lookahead.cli.main import app as cli
from lookahead.errors import LookaheadError
from lookahead.server import ServeConfig, create_app

PREFLIGHT = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Content-Type"}
BODY = {"prompt": "hi", "max_tokens": 1}


def client(**config: Any) -> TestClient:
    def never() -> Any:
        raise LookaheadError("not loaded in this test")

    return TestClient(create_app(ServeConfig(model_id="m", **config), never))  # no lifespan: never loads


@pytest.mark.parametrize("path", ["/v1/completions", "/completion", "/infill", "/tokenize", "/v1/chat/completions"])
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])  # text/plain: no preflight
def test_by_default_a_page_elsewhere_cannot_make_the_service_work(path: str, content_type: str) -> None:
    c = client()
    headers = {"Origin": "https://evil.example", "Content-Type": content_type}
    r = c.post(path, content=b'{"prompt": "hi"}', headers=headers)
    assert r.status_code == 403, r.text
    error = r.json()["error"]
    assert error["code"] == "origin_not_allowed" and "--cors-origins" in error["message"]
    assert not any(k.lower().startswith("access-control") for k in r.headers)
    pre = c.options(path, headers={"Origin": "https://evil.example", **PREFLIGHT})
    assert pre.status_code == 200 and not any(k.lower().startswith("access-control") for k in pre.headers)


def test_by_default_pages_on_this_machine_and_clients_without_an_origin_are_served() -> None:
    c = client()
    assert c.post("/v1/completions", json=BODY).status_code == 503  # past CORS: the model is loading
    for origin in ("http://localhost:3000", "http://127.0.0.1:8080", "http://[::1]:5173"):
        r = c.post("/v1/completions", json=BODY, headers={"Origin": origin})
        assert r.status_code == 503 and r.headers["access-control-allow-origin"] == origin
        assert r.headers["access-control-allow-credentials"] == "true"
    # a page whose name was rebound to this machine still names its own origin
    assert c.post("/completion", json=BODY, headers={"Origin": "http://localhost.evil.example:8000"}).status_code == 403


def test_reads_from_a_page_elsewhere_get_no_cors_headers() -> None:
    r = client().get("/health", headers={"Origin": "https://evil.example"})
    assert r.status_code == 503 and "access-control-allow-origin" not in r.headers


def test_any_origin_when_asked_but_never_with_credentials() -> None:
    c = client(cors_origins=("*",))
    r = c.post("/v1/completions", json=BODY, headers={"Origin": "https://app.example"})
    assert r.status_code == 503 and r.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-credentials" not in r.headers
    pre = c.options("/completion", headers={"Origin": "https://app.example", **PREFLIGHT})
    assert pre.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-credentials" not in pre.headers


def test_a_listed_origin_gets_credentials_and_others_still_do_not() -> None:
    c = client(cors_origins=("https://app.example.com",))
    pre = c.options("/v1/completions", headers={"Origin": "https://app.example.com", **PREFLIGHT})
    assert pre.headers["access-control-allow-origin"] == "https://app.example.com"
    assert pre.headers["access-control-allow-credentials"] == "true"
    other = c.post("/v1/completions", json=BODY, headers={"Origin": "http://localhost:3000"})
    assert other.status_code == 403  # listing origins replaces the default


def test_serve_allows_only_local_pages_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(lookahead.cli.serve_cmd, "run_serve", lambda **kw: seen.update(kw))
    assert CliRunner().invoke(cli, ["serve"]).exit_code == 0
    assert seen["cors_origins"] == "localhost"
    assert ServeConfig(model_id="m").cors_origins == ("localhost",)
