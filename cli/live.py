"""Showing a generation as it streams: plain text, or with `--live` a rich view of the drafts.

`show(events, ...)` consumes a `Model.stream(...)` event iterator and returns its `Result`;
`generate`, `report` (and any command that streams) call it. With `live` and stdout a
terminal, the view is:

- the text as it streams, the part that came from accepted drafts in green;
- a rolling sparkline of α (draft tokens accepted per step) over the last `WINDOW` steps,
  the current draft size (`Step.drafted` tree nodes) and the budget;
- tokens/s over the same steps, plain decoding's tokens/s (1 / the calibrated t(1)) and
  the estimated speedup: the steps' tokens per second of their own verify + draft time
  (like t(1), without the Python around them) over plain decoding's;
- a histogram of accepted lengths.

Otherwise the text is written as it comes, exactly as without `--live`. Ctrl-C stops the
generation (the event generator is closed), prints the summary of what was written so far
and exits 130.

Styling is per step, an approximation: a `Step` emits `accepted` draft tokens and then the
model's own bonus token, but its `text` can lag its tokens (a character split across
tokens, a possible stop string held back), so the step's text is not cut at the exact
token boundary. Its first `accepted / len(tokens)` share of characters is styled as
drafted, the rest as the model's own.
"""

from __future__ import annotations

import sys
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TextIO

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from lookahead.core.engine import Done, Event, Result, Step

WINDOW = 40  # steps in the rolling sparkline and the current rate
DRAFTED_STYLE = "green"
_BLOCKS = " ▁▂▃▄▅▆▇█"
_HIST_LAST = 8  # accepted lengths of 8 or more share the last bar
_REFRESH_S = 0.1  # redraw at most this often


# --- pure pieces ---------------------------------------------------------------------


def sparkline(values: Sequence[float], top: float | None = None) -> str:
    """One block character per value, its height value / top (default: the largest)."""
    if not values:
        return ""
    top = top if top is not None else max(values)
    if top <= 0:
        return _BLOCKS[0] * len(values)
    steps = len(_BLOCKS) - 1
    return "".join(_BLOCKS[max(0, min(steps, round(v / top * steps)))] for v in values)


def histogram(counts: Mapping[int, int], width: int = 24, last: int = _HIST_LAST) -> list[str]:
    """Lines 'length bar count' for accepted lengths 0..last ('8+' holds last and more)."""
    merged = Counter({min(k, last): 0 for k in counts})
    for k, n in counts.items():
        merged[min(k, last)] += n
    if not merged:
        return []
    top = max(merged.values()) or 1
    lines = []
    for k in range(0, max(merged) + 1):
        n = merged.get(k, 0)
        label = f"{k}+" if k == last else str(k)
        bar = "█" * round(n / top * width) if n else ""
        lines.append(f"{label:>3} {bar} {n}".rstrip() if n else f"{label:>3}")
    return lines


def speedup(tokens_per_s: float, plain_tokens_per_s: float | None) -> float | None:
    """Estimated speedup over plain decoding (None when either rate is unknown)."""
    if not plain_tokens_per_s or plain_tokens_per_s <= 0 or tokens_per_s <= 0:
        return None
    return tokens_per_s / plain_tokens_per_s


def split_step_text(step: Step) -> tuple[str, str]:
    """The step's text as (from accepted drafts, the model's own), split at the drafted
    share of its tokens (see the module doc: an approximation)."""
    n = len(step.tokens)
    if not n or not step.text:
        return "", step.text
    cut = round(len(step.text) * min(step.accepted, n) / n)
    return step.text[:cut], step.text[cut:]


def summary_line(tokens: int, seconds: float, steps: int, alpha: float, prefill_s: float | None = None) -> str:
    """The one-line summary a streaming command prints on stderr."""
    rate = tokens / seconds if seconds > 0 else 0.0
    line = f"{tokens} tokens in {seconds:.2f}s ({rate:.1f} tok/s), {steps} steps, alpha {alpha:.2f}"
    return line + (f", prefill {prefill_s:.2f}s" if prefill_s is not None else "")


@dataclass
class Tally:
    """What the steps so far add up to, and the rolling window the live view shows."""

    window: int = WINDOW
    tokens: int = 0
    steps: int = 0
    accepted: int = 0
    seconds: float = 0.0
    drafted_now: int = 0
    lengths: Counter[int] = field(default_factory=Counter)
    # the window: (accepted, tokens, wall seconds, the step's verify + draft seconds)
    recent: deque[tuple[int, int, float, float]] = field(default_factory=deque)

    def add(self, step: Step, seconds: float) -> None:
        self.tokens += len(step.tokens)
        self.steps += 1
        self.accepted += step.accepted
        self.seconds += seconds
        self.drafted_now = step.drafted
        self.lengths[step.accepted] += 1
        self.recent.append((step.accepted, len(step.tokens), seconds, step.verify_s + step.draft_s))
        while len(self.recent) > self.window:
            self.recent.popleft()

    @property
    def alpha(self) -> float:
        return self.accepted / self.steps if self.steps else 0.0

    def recent_alpha(self) -> list[int]:
        return [a for a, _, _, _ in self.recent]

    def tokens_per_s(self) -> float:
        """Over the window, by the wall clock (what the reader gets)."""
        seconds = sum(s for _, _, s, _ in self.recent)
        return sum(n for _, n, _, _ in self.recent) / seconds if seconds > 0 else 0.0

    def engine_tokens_per_s(self) -> float:
        """Over the window, by the steps' own verify + draft time: the rate to hold against
        plain decoding's 1 / t(1), which is verify time alone too (the Python around the
        steps, this view's drawing included, slows both alike)."""
        seconds = sum(s for _, _, _, s in self.recent)
        return sum(n for _, n, _, _ in self.recent) / seconds if seconds > 0 else 0.0

    def summary(self) -> str:
        return summary_line(self.tokens, self.seconds, self.steps, self.alpha)


# --- the view ------------------------------------------------------------------------


@dataclass(frozen=True)
class LiveInfo:
    """What the live view shows beside the steps: the draft budget, plain decoding's rate."""

    budget: int
    plain_tokens_per_s: float | None  # 1 / t(1) when calibrated; None for plain decoding


def panel(tally: Tally, info: LiveInfo) -> Panel:
    """The statistics panel under the streaming text."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column()
    recent = tally.recent_alpha()
    now = sum(recent) / len(recent) if recent else 0.0
    peak = max(recent, default=0)
    spark = sparkline(recent)
    grid.add_row("α", Text(f"{spark}  {now:.2f} accepted/step over {len(recent)} steps, peak {peak}", style="cyan"))
    grid.add_row("draft", f"{tally.drafted_now} nodes this step (budget {info.budget})")
    gain = speedup(tally.engine_tokens_per_s(), info.plain_tokens_per_s)
    plain = f"{info.plain_tokens_per_s:.1f}" if info.plain_tokens_per_s else "-"
    grid.add_row(
        "tok/s",
        f"{tally.tokens_per_s():.1f} now, plain decoding {plain} (from t(1)), est. speedup "
        + (f"{gain:.2f}x" if gain else "-"),
    )
    grid.add_row("accepted", "\n".join(histogram(tally.lengths)) or "-")
    grid.add_row("", Text("green: text from accepted drafts", style=DRAFTED_STYLE))
    return Panel(grid, title=f"{tally.tokens} tokens, {tally.steps} steps", title_align="left")


class _View:
    """The rich Live region: finished lines are printed above it, the line being written
    and the panel stay in it."""

    def __init__(self, console: Console, info: LiveInfo) -> None:
        self.console = console
        self.info = info
        self.line = Text()
        self.live = Live(console=console, auto_refresh=False, transient=True, vertical_overflow="crop")
        self._drawn = 0.0

    def start(self) -> None:
        self.live.start()

    def add(self, step: Step, tally: Tally) -> None:
        drafted, own = split_step_text(step)
        self.line.append(drafted, style=DRAFTED_STYLE)
        self.line.append(own)
        if "\n" in self.line.plain:
            *done, rest = self.line.split("\n", allow_blank=True)
            for line in done:
                self.console.print(line, soft_wrap=True, highlight=False)
            self.line = rest
        now = time.monotonic()
        if now - self._drawn >= _REFRESH_S:
            self.draw(tally)
            self._drawn = now

    def draw(self, tally: Tally) -> None:
        self.live.update(Group(self.line, panel(tally, self.info)), refresh=True)

    def stop(self) -> None:
        self.live.stop()
        self.console.print(self.line, soft_wrap=True, highlight=False)


def show(
    events: Iterator[Event],
    *,
    echo: bool,
    live: LiveInfo | None = None,
    out: TextIO | None = None,
    err: Console | None = None,
) -> Result:
    """Consume a generation's events and return its Result.

    echo: write the text to `out` (stdout) as it comes, then a newline. live: show the live
    view instead, when `out` is a terminal. Ctrl-C closes the generator, prints what the
    steps so far add up to on `err` and exits 130.
    """
    out = out or sys.stdout
    err = err or Console(stderr=True)
    tally = Tally()
    view = _View(Console(file=out), live) if live is not None and out.isatty() else None
    result: Result | None = None
    last = time.perf_counter()
    try:
        if view is not None:
            view.start()
        for event in events:
            now = time.perf_counter()
            if isinstance(event, Step):
                # the first step's wall time includes the prefill: count its own times
                tally.add(event, now - last if tally.steps else event.verify_s + event.draft_s)
                if view is not None:
                    view.add(event, tally)
                elif echo and event.text:
                    out.write(event.text)
                    out.flush()
            elif isinstance(event, Done):
                result = event.result
            last = now
    except KeyboardInterrupt:
        close = getattr(events, "close", None)
        if close is not None:
            close()
        _finish(view, echo, out)
        err.print(f"[dim]interrupted: {tally.summary()}[/dim]", highlight=False)
        raise typer.Exit(130) from None
    _finish(view, echo, out)
    assert result is not None, "the generation ended without a Done event"
    return result


def _finish(view: _View | None, echo: bool, out: TextIO) -> None:
    if view is not None:
        view.stop()
    elif echo:
        out.write("\n")
        out.flush()
