"""Request bodies checked before any route reads them (`lookahead.server.json_body`)."""

from __future__ import annotations

from lookahead.server.json_body import _as_json, lone_surrogate


def test_a_lone_surrogate_is_found_with_the_path_of_its_field() -> None:
    assert lone_surrogate(b'{"prompt": "a\\ud83d"}') == "prompt"
    assert lone_surrogate(b'{"stop": ["x", "\\udc00x"]}') == "stop[1]"
    assert lone_surrogate(b'{"a": {"k\\ud800": 1}}') == "a.k\ud800"
    assert lone_surrogate(b'{"m": [{"content": [{"text": "\\uDFFF"}]}]}') == "m[0].content[0].text"
    assert lone_surrogate(b'"\\ud800"') == ""


def test_bodies_without_a_lone_surrogate_pass() -> None:
    for raw in [
        b'{"prompt": "plain"}',
        b'{"prompt": "\\ud83d\\ude00 an emoji as a pair"}',
        b'{"prompt": "\\\\ud800 an escaped backslash"}',
        b'{"prompt": "not json \\ud800',
        b'\xff\xfe{"prompt": "\\ud800"}',
    ]:
        assert lone_surrogate(raw) is None


def test_a_body_that_does_not_say_json_is_read_as_json() -> None:
    scope = {"type": "http", "headers": [(b"content-type", b"application/x-www-form-urlencoded"), (b"x", b"1")]}
    assert dict(_as_json(scope)["headers"]) == {b"content-type": b"application/json", b"x": b"1"}
    json_headers = [(b"content-type", b"application/json; charset=utf-8"), (b"content-length", b"9")]
    assert _as_json({"type": "http", "headers": json_headers})["headers"] == json_headers
    assert dict(_as_json({"type": "http", "headers": []})["headers"]) == {b"content-type": b"application/json"}
