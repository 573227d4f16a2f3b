"""Prometheus metrics of the service, in a registry of its own (one per app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, disable_created_metrics, generate_latest

from lookahead.core.engine import Stats

# accepted draft tokens per verify step, per request
# no `*_created` series beside every counter: they double /metrics for no use here
disable_created_metrics()

ALPHA_BUCKETS = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0)
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 16)
TOKEN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        p = "lookahead_"
        self.requests = Counter(p + "requests", "Requests answered", ["endpoint", "status"], registry=r)
        self.prompt_tokens = Counter(p + "prompt_tokens", "Prompt tokens processed", registry=r)
        self.completion_tokens = Counter(p + "completion_tokens", "Tokens generated", registry=r)
        self.steps = Counter(p + "verify_steps", "Verify steps (one llama_decode each)", registry=r)
        self.drafted = Counter(p + "draft_tokens", "Draft tokens verified", registry=r)
        self.accepted = Counter(p + "accepted_tokens", "Draft tokens accepted", registry=r)
        self.alpha = Histogram(
            p + "alpha", "Accepted draft tokens per verify step, per request", buckets=ALPHA_BUCKETS, registry=r
        )
        self.decode_tps = Gauge(p + "decode_tokens_per_second", "Decode speed of the last request", registry=r)
        self.queue_depth = Gauge(p + "queue_depth", "Requests waiting for the model", registry=r)
        self.running = Gauge(p + "requests_running", "Requests generating now (at most --parallel)", registry=r)
        self.slots = Gauge(p + "parallel_slots", "Requests that may generate together (--parallel)", registry=r)
        self.batch_size = Histogram(
            p + "batch_requests", "Requests verified in one decode, per step", buckets=BATCH_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            p + "batch_tokens", "Tokens in one verify decode (roots + draft nodes), per step",
            buckets=TOKEN_BUCKETS, registry=r,
        )
        self.occupancy = Gauge(p + "slot_occupancy", "Share of the slots in use at the last step", registry=r)
        self.kv_cells = Gauge(p + "kv_cells", "KV cache cells in use after the last step", registry=r)
        self.kv_cells_cached = Gauge(
            p + "kv_cells_cached", "KV cache cells kept for the prompt cache (committed tokens)", registry=r
        )
        self.cache_hits = Counter(p + "prompt_cache_hits", "Requests that reused cached prompt cells", registry=r)
        self.tokens_cached = Counter(
            p + "prompt_tokens_cached", "Prompt tokens reused from the KV cache, not decoded again", registry=r
        )
        self.tokens_shifted = Counter(
            p + "prompt_tokens_shifted",
            "Prompt tokens reused by moving cached cells to new positions (--cache-reuse), not decoded again",
            registry=r,
        )
        self._shifted_seen = 0  # the worker's running total when last read
        self.errors = Counter(p + "errors", "Errors answered, by type", ["type"], registry=r)
        self.idle_running = Gauge(
            p + "idle_work", "1 while the service begins a guessed next request (--idle-tokens)", registry=r
        )
        self.idle_tokens = Counter(
            p + "idle_tokens",
            "Tokens decoded while idle for a guessed next request: prompt and written (decoded), written",
            ["kind"],
            registry=r,
        )
        for kind in ("decoded", "written"):
            self.idle_tokens.labels(kind)  # listed at 0 from the start
        self.cancelled = Counter(p + "cancelled", "Generations cancelled by a client disconnect", registry=r)

    def finished(self, prompt_tokens: int, stats: Stats) -> None:
        self.prompt_tokens.inc(prompt_tokens)
        self.completion_tokens.inc(stats.n_tokens)
        self.steps.inc(stats.steps)
        self.drafted.inc(stats.drafted)
        self.accepted.inc(stats.accepted)
        if stats.tokens_cached:
            self.cache_hits.inc()
            self.tokens_cached.inc(stats.tokens_cached)
        if stats.steps:
            self.alpha.observe(stats.alpha)
        if stats.decode_s > 0:
            self.decode_tps.set(stats.tokens_per_s)

    def shifted_total(self, total: int) -> None:
        """The worker's running count of tokens kept by KV shift: the counter takes what is
        new. Read at every request's end, cancelled ones too (an editor's time budget), as
        the shift happened whatever became of the request."""
        if total > self._shifted_seen:
            self.tokens_shifted.inc(total - self._shifted_seen)
        self._shifted_seen = total

    def render(self) -> bytes:
        return generate_latest(self.registry)
