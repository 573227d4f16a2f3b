"""The OpenAI-compatible service (`lookahead serve`): see `app.py`."""

from lookahead.server.app import ServeConfig, create_app

__all__ = ["ServeConfig", "create_app"]
