"""The live view (`cli/live.py`): its pieces without a model, `show` over made-up events,
and `generate --live` / `report --live` on a pseudo-terminal with SmolLM2."""

from __future__ import annotations

import fcntl
import io
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
from rich.console import Console

from lookahead.cli.live import LiveInfo, Tally, histogram, show, sparkline, speedup, split_step_text, summary_line
from lookahead.core.engine import Done, Event, Result, Stats, Step

ROOT = Path(__file__).resolve().parent.parent


def step(text: str, tokens: int, accepted: int, drafted: int = 8, verify_s: float = 0.01) -> Step:
    return Step(list(range(tokens)), text, drafted, accepted, accepted, verify_s, 0.001, 1.0)


# --- pure pieces -------------------------------------------------------------------------


def test_sparkline_scales_to_the_top() -> None:
    assert sparkline([]) == ""
    assert sparkline([0, 4, 8]) == " ▄█"
    assert sparkline([0, 0]) == "  "
    assert sparkline([2, 2], top=8) == "▂▂"
    assert sparkline([16], top=8) == "█"  # clipped
    assert len(sparkline(list(range(40)))) == 40


def test_histogram_bars_and_the_last_bucket() -> None:
    assert histogram(Counter()) == []
    lines = histogram(Counter({0: 10, 2: 5}), width=10)
    assert lines == ["  0 ██████████ 10", "  1", "  2 █████ 5"]
    lines = histogram(Counter({1: 1, 9: 2, 12: 2}), width=4, last=8)
    assert lines[-1] == " 8+ ████ 4"
    assert len(lines) == 9


def test_speedup() -> None:
    assert speedup(30.0, 20.0) == pytest.approx(1.5)
    assert speedup(30.0, None) is None
    assert speedup(0.0, 20.0) is None
    assert speedup(30.0, 0.0) is None


def test_step_text_split_by_the_drafted_share() -> None:
    assert split_step_text(step("abcdef", 3, 2)) == ("abcd", "ef")
    assert split_step_text(step("abc", 1, 0)) == ("", "abc")
    assert split_step_text(step("", 4, 3)) == ("", "")  # text held back (a pending stop string)
    assert split_step_text(step("ab", 0, 0)) == ("", "ab")
    assert split_step_text(step("abcd", 2, 5)) == ("abcd", "")  # stopped inside the drafts


def test_tally_window_and_rates() -> None:
    tally = Tally(window=3)
    for i in range(5):
        tally.add(step("x", i + 1, i, verify_s=0.009), 0.1)
    assert tally.steps == 5 and tally.tokens == 15 and tally.accepted == 10
    assert tally.recent_alpha() == [2, 3, 4]
    assert tally.tokens_per_s() == pytest.approx(12 / 0.3)
    assert tally.engine_tokens_per_s() == pytest.approx(12 / 0.03)
    assert tally.lengths == Counter({0: 1, 1: 1, 2: 1, 3: 1, 4: 1})
    assert tally.alpha == 2.0
    assert tally.summary() == "15 tokens in 0.50s (30.0 tok/s), 5 steps, alpha 2.00"
    assert summary_line(10, 2.0, 4, 1.5, 0.25) == "10 tokens in 2.00s (5.0 tok/s), 4 steps, alpha 1.50, prefill 0.25s"


# --- show() over made-up events -----------------------------------------------------------

STEPS = [step("Hello", 1, 0), step(", wor", 3, 2), step("ld\nsecond", 2, 1), step(" line", 1, 0)]
TEXT = "Hello, world\nsecond line"


def events(done: bool = True) -> Iterator[Event]:
    yield from STEPS
    if done:
        yield Done(Result(TEXT, [], Stats(n_tokens=7, steps=4), "stop"))


def unstyled(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def err_console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=100), buf


def test_plain_streaming() -> None:
    out, (err, _) = io.StringIO(), err_console()
    result = show(events(), echo=True, out=out, err=err)
    assert out.getvalue() == TEXT + "\n" and result.text == TEXT
    out = io.StringIO()
    show(events(), echo=False, out=out, err=err)
    assert out.getvalue() == ""


def test_live_off_a_terminal_is_plain_streaming() -> None:
    out, (err, _) = io.StringIO(), err_console()
    show(events(), echo=True, live=LiveInfo(64, 50.0), out=out, err=err)
    assert out.getvalue() == TEXT + "\n"


def test_live_view_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    out, (err, _) = Terminal(), err_console()
    result = show(events(), echo=True, live=LiveInfo(64, 50.0), out=out, err=err)
    shown = out.getvalue()
    assert result.text == TEXT
    assert "α" in shown and "budget 64" in shown and "est. speedup" in shown and "plain decoding 50.0" in shown
    assert "\x1b[32m" in shown  # drafted text in green
    assert "second line" in unstyled(shown).rsplit("╯", 1)[-1]  # the last line, after the view is gone


def test_ctrl_c_closes_the_generator_and_exits_130() -> None:
    closed = []

    def interrupted() -> Iterator[Event]:
        try:
            yield from STEPS[:2]
            raise KeyboardInterrupt
        finally:
            closed.append(True)

    for live in (None, LiveInfo(64, 50.0)):
        closed.clear()
        out, (err, buf) = Terminal(), err_console()
        with pytest.raises(typer.Exit) as info:
            show(interrupted(), echo=True, live=live, out=out, err=err)
        assert info.value.exit_code == 130 and closed
        assert "interrupted: 4 tokens" in buf.getvalue() and "2 steps" in buf.getvalue()
        assert "Hello, wor" in unstyled(out.getvalue())


# --- on a pseudo-terminal, with the real model --------------------------------------------

COUNT = "Count from 1 to 200, separated by commas: 1, 2, 3, 4,"


def _default_sigint() -> None:
    """In the child before it starts: Ctrl-C's default action, as in a terminal. A runner
    started as a background job ignores SIGINT, and an ignored signal stays ignored across
    exec, so Python would install no KeyboardInterrupt for it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_on_pty(args: list[str], interrupt_after: float | None = None, timeout: float = 240) -> tuple[int, str]:
    """`python -m lookahead.cli.main ARGS` with stdout and stderr on a pty (100 x 40); with
    `interrupt_after`, SIGINT that long after the live view first shows. Returns the exit
    code and everything written."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "40"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "lookahead.cli.main", *args],
        cwd=ROOT, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True,
        preexec_fn=_default_sigint,
    )  # fmt: skip
    os.close(slave)
    data, seen, sent = b"", None, False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the child closed the pty
                    break
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                break
            if seen is None and b"tok/s" in data:
                seen = time.monotonic()
            if interrupt_after is not None and seen and not sent and time.monotonic() - seen > interrupt_after:
                proc.send_signal(signal.SIGINT)
                sent = True
        code = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    return code, data.decode("utf-8", "replace")


@pytest.mark.model
def test_generate_live_on_a_terminal(smol_path: Path) -> None:
    code, shown = run_on_pty(["generate", COUNT, "--model", str(smol_path), "--threads", "1", "-n", "48", "--live"])
    assert code == 0, shown
    assert "Traceback" not in shown
    assert "α" in shown and "accepted/step" in shown
    assert "nodes this step (budget 64)" in shown and "plain decoding" in shown
    assert "48 tokens in" in shown  # the summary, after the view


@pytest.mark.model
def test_generate_live_ctrl_c(smol_path: Path) -> None:
    args = ["generate", COUNT, "--model", str(smol_path), "--threads", "1", "-n", "2000", "--live"]
    code, shown = run_on_pty(args, interrupt_after=1.0)
    assert code == 130, shown
    assert "Traceback" not in shown and "KeyboardInterrupt" not in shown
    assert "interrupted: " in shown and " steps, alpha " in shown
    assert "2000 tokens in" not in shown  # it stopped early


@pytest.mark.model
def test_report_live_to_a_file(smol_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    example = ROOT / "examples" / "sales"
    args = ["report", str(example / "weekly.md"), str(example / "sales.csv"), "-o", str(out)]
    code, shown = run_on_pty([*args, "--model", str(smol_path), "--threads", "1", "-n", "32", "--live"])
    assert code == 0, shown
    assert "accepted/step" in shown and "Traceback" not in shown
    assert out.read_text(encoding="utf-8").strip()
