"""llama.vim's own request pattern, built from a file with no server and no model.

A port of the parts of llama.vim's `autoload/llama.vim` (default configuration) that decide
what reaches the server while someone types new lines:

- `llama#fim` with an empty `a:prev` (the quick request): `t_max_predict_ms` 250, the local
  context of `s:fim_ctx_local` (256 lines above the cursor line, 64 below; a line holding
  only whitespace is sent as an empty `prompt` with `n_indent` 0), the ring's chunks as
  `input_extra`, `top_k` 40, `top_p` 0.9, samplers `top_k, top_p, infill`, `cache_prompt`.
- `s:fim_render` turns the answer into the suggestion's lines (trailing empty lines dropped,
  the leading whitespace the line already has taken off its first line, suggestions that
  repeat the text below discarded, the rest of the cursor line appended to the last line).
- `s:fim_try_hint` then calls `llama#fim` again with those lines as `a:prev` (the follow-up,
  which assumes the suggestion accepted): `s:fim_ctx_local` builds the context as if they
  were inserted (the window starts `len(prev) - 1` lines later, the suggestion's first lines
  join the prefix, its last line is the `prompt`, the same suffix, `n_indent` the last
  request's), `t_max_predict_ms` 1000 (`g:llama_config.t_max_predict_ms`).
- `s:ring_update`: a chunk entering the ring is sent at once in an `n_predict: 0` request
  (the ring's chunks only), so the server has them cached before the next suggestion.

Lines are 0-based here (`y`), where Vim's are 1-based.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

N_PREFIX = 256  # g:llama_config.n_prefix
N_SUFFIX = 64  # n_suffix
N_PREDICT = 128  # n_predict
T_MAX_PROMPT_MS = 500  # t_max_prompt_ms
T_MAX_PREDICT_MS = 1000  # t_max_predict_ms: the follow-up's budget
T_QUICK_MS = 250  # the quick request's budget (hard-coded in llama#fim)
RING_CHUNK_SIZE = 64  # ring_chunk_size
# what llama#fim asks the server to return
RESPONSE_FIELDS = [
    "content",
    "timings/prompt_n",
    "timings/prompt_ms",
    "timings/prompt_per_token_ms",
    "timings/prompt_per_second",
    "timings/predicted_n",
    "timings/predicted_ms",
    "timings/predicted_per_token_ms",
    "timings/predicted_per_second",
    "truncated",
    "tokens_cached",
]
# added for measuring (the server's work is the same): the reused prompt tokens and drafts
MEASURED_FIELDS = ["timings/cache_n", "timings/draft_n", "timings/draft_n_accepted", "tokens_evaluated"]


@dataclass(frozen=True)
class Context:
    """`s:fim_ctx_local`'s result: what one request sends about the buffer."""

    prefix: str
    middle: str
    suffix: str
    indent: int
    line_cur_suffix: str  # the cursor line after the cursor (the quick request's only)


def _blank(s: str) -> bool:
    return s.strip(" \t") == ""


def _indent(s: str) -> int:
    return len(s) - len(s.lstrip(" \t"))


def ctx_local(
    buf: list[str],
    y: int,
    x: int,
    prev: list[str] | None = None,
    *,
    indent_last: int = -1,
    n_prefix: int = N_PREFIX,
    n_suffix: int = N_SUFFIX,
) -> Context:
    """The local context at line `y`, column `x` of `buf`; with `prev` (a suggestion's lines),
    as if the suggestion had been inserted at the cursor."""
    suffix_lines = buf[y + 1 : min(len(buf), y + 1 + n_suffix)]
    if not prev:
        cur = buf[y]
        cur_prefix, cur_suffix = cur[:x], cur[x:]
        above = buf[max(0, y - n_prefix) : y]
        indent = _indent(cur)
        if _blank(cur):  # a line of whitespace: from its beginning
            indent, cur_prefix, cur_suffix = 0, "", ""
    else:
        cur = buf[y] + prev[0] if len(prev) == 1 else prev[-1]
        cur_prefix, cur_suffix = cur, ""
        above = buf[max(0, y - n_prefix + len(prev) - 1) : y]
        if len(prev) > 1:
            above = above + [buf[y] + prev[0]] + prev[1:-1]
        indent = indent_last
    return Context(
        prefix="\n".join(above) + "\n",
        middle=cur_prefix,
        suffix=cur_suffix + "\n" + "\n".join(suffix_lines) + "\n",
        indent=indent,
        line_cur_suffix=cur_suffix,
    )


def fim_body(ctx: Context, extra: list[dict[str, Any]], *, quick: bool, seed: int | None = None) -> dict[str, Any]:
    """llama#fim's request body, field for field. For measuring: `response_fields` also names
    the reused prompt tokens and the drafts, and `seed` (when given) fixes the draw."""
    body: dict[str, Any] = {
        "id_slot": 0,
        "input_prefix": ctx.prefix,
        "input_suffix": ctx.suffix,
        "input_extra": extra,
        "prompt": ctx.middle,
        "n_predict": N_PREDICT,
        "stop": [],
        "n_indent": ctx.indent,
        "top_k": 40,
        "top_p": 0.90,
        "samplers": ["top_k", "top_p", "infill"],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": T_MAX_PROMPT_MS,
        "t_max_predict_ms": T_QUICK_MS if quick else T_MAX_PREDICT_MS,
        "response_fields": RESPONSE_FIELDS + MEASURED_FIELDS,
    }
    if seed is not None:
        body["seed"] = seed
    return body


def ring_body(extra: list[dict[str, Any]]) -> dict[str, Any]:
    """s:ring_update's request: the ring's chunks only, nothing predicted."""
    return {
        "id_slot": 0,
        "input_prefix": "",
        "input_suffix": "",
        "input_extra": extra,
        "prompt": "",
        "n_predict": 0,
        "temperature": 0.0,
        "samplers": [],
        "stream": False,
        "cache_prompt": True,
        "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1,
        "response_fields": [""],
    }


def bufenter_chunk(lines: list[str], filename: str, time: int = 0) -> dict[str, Any]:
    """The chunk llama.vim picks when a file is opened (BufEnter, cursor on its first line):
    lines 1 to 1 + ring_chunk_size/2, whole, as `s:ring_get_extra` sends it."""
    text = lines[: 1 + RING_CHUNK_SIZE // 2]
    return {"text": "\n".join(text) + "\n", "time": [time, 0], "filename": filename}


def render(content: str, buf: list[str], y: int, x: int) -> tuple[list[str], bool]:
    """s:fim_render: the suggestion's lines as shown (and sent back as the follow-up's `prev`)
    and whether it can be accepted."""
    lines = content.split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    can_accept = bool(lines)
    if not lines:
        lines = [""]
    cur = buf[y]
    if _blank(cur):
        lead = min(_indent(lines[0]), len(cur))
        cur, lines[0] = lines[0][:lead], lines[0][lead:]
    cur_prefix, cur_suffix = cur[:x], cur[x:]
    below = buf[y + 1 :]
    if len(lines) == 1 and lines[0] == "":
        lines = [""]
    if len(lines) > 1 and lines[0] == "" and lines[1:] == below[: len(lines) - 1]:
        lines = [""]
    if len(lines) == 1 and lines[0] == cur_suffix:
        lines = [""]
    cmp_y = y + 1  # the first non-blank line below (Vim: while cmp_y < line('$'))
    while cmp_y < len(buf) - 1 and _blank(buf[cmp_y]):
        cmp_y += 1
    line_at = buf[cmp_y] if cmp_y < len(buf) else ""
    if cur_prefix + lines[0] == line_at:
        nxt = buf[cmp_y + 1] if cmp_y + 1 < len(buf) else ""
        if len(lines) == 1:
            lines = [""]
        # Vim's nxt[:len - 1] is the whole line when len is 0
        if len(lines) == 2 and lines[-1] == (nxt[: len(lines[-1])] if lines[-1] else nxt):
            lines = [""]
        if len(lines) > 2 and "\n".join(lines[1:]) == "\n".join(buf[cmp_y + 1 : cmp_y + len(lines)]):
            lines = [""]
    lines[-1] += cur_suffix
    if "\n".join(lines).strip() == "":
        can_accept = False
    return lines, can_accept


@dataclass(frozen=True)
class NewLine:
    """The buffer when the user has just opened a new line (its indentation typed)."""

    buf: list[str]
    y: int  # the cursor line
    x: int  # the cursor column (after the indentation)


@dataclass(frozen=True)
class VimSession:
    """One file, the place typed into, the lines typed there and the ring's chunks."""

    name: str
    start: int  # first line typed (0-based)
    n_lines: int
    lines: list[str]  # the file as it is in the end
    extra: list[dict[str, Any]]

    def new_lines(self) -> list[NewLine]:
        """At each line typed: the file above it as typed so far, the new line holding only
        its indentation, the rest of the file below (as it was before the session)."""
        out = []
        before, after = self.lines[: self.start], self.lines[self.start + self.n_lines :]
        for i in range(self.n_lines):
            line = self.lines[self.start + i]
            typed = self.lines[self.start : self.start + i]
            out.append(NewLine(before + typed + [line[: _indent(line)]] + after, self.start + i, _indent(line)))
        return out

    def past_window(self) -> bool:
        """Whether the cursor is past the 256-line prefix window (it slides at every line)."""
        return self.start >= N_PREFIX
