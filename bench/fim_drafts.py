"""Drafts against plain decoding on an editor's fill-in-the-middle requests, sampled as
llama.vim samples (`top_k` 40, `top_p` 0.9, the `infill` sampler, no temperature step).

    python -m bench.fim_drafts                  # 8 cursor places, 2 rounds, 64 tokens each
    python -m bench.fim_drafts --rounds 1 --places 2

At each place (a new line typed into a file of Python's standard library: 256 lines above
the cursor, 64 below, the first lines of two other files as `input_extra` chunks, as
`bench/vim_session.py` builds them) the same request is decoded plainly and with drafts, in
one process, interleaved (the order alternates), with the same seed: a sampled token is the
n-th random draw whether or not drafts were verified, so both write the same text unless a
batched kernel moved a logit across a draw. End tokens are banned so every request writes
`--tokens` tokens. The controller learns across requests as in `lookahead serve`.

Per request: decode tokens/s plainly and with drafts. Of the steps that verified drafts: the
tokens they produced, their verify time in plain steps' time (the median plain step of the
same request), so their realized gain (tokens per plain step's time), beside the gain the
controller expected when it chose them. Results: bench/results/fim-drafts-<commit>.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sysconfig
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.provenance import run_info
from lookahead.api import load
from lookahead.apps.fim import Chunk
from lookahead.core.draft_state import DraftConfig
from lookahead.core.request import Done, Step
from lookahead.core.sampling import SamplingConfig
from lookahead.server.fim import fim_tokens_and_sources

RESULTS = Path(__file__).parent / "results"
FILES = {
    "argparse.py": ("optparse.py", "getopt.py"),
    "asyncio/base_events.py": ("asyncio/events.py", "asyncio/selector_events.py"),
}
LINES = (230, 420, 650, 900)  # cursor lines: before and well past the 256-line window
N_PREFIX, N_SUFFIX, CHUNK_LINES = 256, 64, 64


@dataclass
class Run:
    place: str
    drafts: bool
    tokens: int
    decode_s: float
    tok_s: float
    text: str
    # steps that verified drafts: tokens out, verify seconds, expected gain (mean)
    probe_steps: int = 0
    draft_steps: int = 0
    draft_tokens: int = 0
    draft_verify_s: float = 0.0
    expected_gain: float = 0.0
    plain_step_s: float = 0.0  # median verify time of the steps without drafts
    expected_tokens: float = 0.0  # of the drafting steps: the tokens the controller expected
    expected_plain_steps: float = 0.0  # and their cost it predicted, in plain steps
    round: int = 0


def no_end(vocab: Any) -> tuple[tuple[int, float], ...]:
    """A logit bias that bans every end token, so a request writes all its tokens."""
    ends = {vocab.eot(), *(t for t in range(vocab.n_vocab) if vocab.is_eog(t))}
    return tuple((t, float("-inf")) for t in sorted(ends))


def llama_vim_sampling(seed: int, vocab: Any, bias: tuple[tuple[int, float], ...]) -> SamplingConfig:
    """llama.vim's samplers: `top_k` 40, `top_p` 0.9, infill, no temperature step."""
    return SamplingConfig(temperature=1.0, top_k=40, top_p=0.9, seed=seed, logit_bias=bias, infill=vocab)


def places(lib: Path) -> list[tuple[str, str, str, list[Chunk]]]:
    out = []
    for name, others in FILES.items():
        lines = (lib / name).read_text().splitlines()
        extra = [Chunk(o, "\n".join((lib / o).read_text().splitlines()[:CHUNK_LINES]) + "\n") for o in others]
        for y in LINES:
            # a new, empty line typed before line y (llama.vim's blank-line context)
            prefix = "\n".join(lines[max(0, y - N_PREFIX) : y]) + "\n"
            suffix = "\n" + "\n".join(lines[y : y + N_SUFFIX]) + "\n"
            out.append((f"{name}:{y}", prefix, suffix, extra))
    return out


def run_one(
    model: Any, place: str, tokens: list[int], sources: list[Any], sampling: SamplingConfig, n: int, drafts: bool
) -> Run:
    policy = model.drafting.policy(DraftConfig()) if drafts else None
    # per step: the event, the gain the controller expected, whether it was a probe, and the
    # cost it predicted for the step in plain steps (t(n + 1) / t(1))
    steps: list[tuple[Step, float, bool, float]] = []
    result = None
    for ev in model.stream("", tokens=tokens, sampling=sampling, max_tokens=n, sources=sources,
                           draft=DraftConfig(enabled=drafts), cache_prompt=False):
        if isinstance(ev, Step):
            last = policy.last if policy is not None else None
            rel = 1.0
            if policy is not None and ev.drafted:
                t = policy.cost.table(ev.drafted + 2)
                rel = float(t[ev.drafted + 1] / t[1])
            steps.append((ev, last.expected_gain if last else 1.0, bool(last and last.probing), rel))
        elif isinstance(ev, Done):
            result = ev.result
    assert result is not None
    # the first step also decodes the prompt's last token; probes are drafts verified to learn
    plain = [s.verify_s for s, _, _, _ in steps[1:] if s.drafted == 0]
    drafting = [(s, g, rel) for s, g, probe, rel in steps[1:] if s.drafted > 0 and not probe]
    return Run(
        place, drafts, len(result.tokens), result.stats.decode_s, result.stats.tokens_per_s,
        result.text,
        probe_steps=sum(probe for _, _, probe, _ in steps[1:]),
        draft_steps=len(drafting),
        draft_tokens=sum(len(s.tokens) for s, _, _ in drafting),
        draft_verify_s=sum(s.verify_s for s, _, _ in drafting),
        expected_gain=statistics.fmean(g for _, g, _ in drafting) if drafting else 0.0,
        expected_tokens=sum(g * rel for _, g, rel in drafting),
        expected_plain_steps=sum(rel for _, _, rel in drafting),
        plain_step_s=statistics.median(plain) if plain else 0.0,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--places", type=int, default=len(FILES) * len(LINES))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--note", default="")
    ap.add_argument("--out", default=None, help="results name (default fim-drafts-<commit>)")
    args = ap.parse_args()

    model = load(args.model)
    vocab = model.vocab
    banned = no_end(vocab)
    lib = Path(sysconfig.get_paths()["stdlib"])
    runs: list[Run] = []
    todo = places(lib)[: args.places]
    for rnd in range(args.rounds):
        for i, (place, prefix, suffix, extra) in enumerate(todo):
            seed = 1000 * rnd + i
            sampling = llama_vim_sampling(seed, vocab, banned)
            order = (False, True) if (rnd + i) % 2 == 0 else (True, False)
            for drafts in order:
                # the request's own sources are streams: fresh ones for each run
                tokens, sources = fim_tokens_and_sources(
                    model, prefix, suffix, extra=extra, n_ctx=4096, n_predict=args.tokens
                )
                run = run_one(model, place, tokens, sources, sampling, args.tokens, drafts)
                run.round = rnd
                runs.append(run)
                kind = "drafts" if drafts else "plain"
                print(
                    f"r{rnd} {place:28s} {kind:6s} {run.tok_s:5.1f} tok/s probes {run.probe_steps:3d} "
                    f"draft steps {run.draft_steps:3d} tokens {run.draft_tokens:3d} exp {run.expected_gain:.2f}",
                    flush=True,
                )
    write(args, runs)


def summary(runs: list[Run]) -> dict[str, Any]:
    pairs: dict[tuple[str, int], dict[bool, Run]] = {}
    for r in runs:
        pairs.setdefault((r.place, r.round), {})[r.drafts] = r
    both = [p for p in pairs.values() if len(p) == 2]
    ratios = [p[True].tok_s / p[False].tok_s for p in both]
    # the drafting steps' verify time counted in plain steps of the same request
    tokens = sum(p[True].draft_tokens for p in both)
    plain_steps = sum(p[True].draft_verify_s / p[False].plain_step_s for p in both if p[False].plain_step_s > 0)
    exp = [p[True].expected_gain for p in both if p[True].draft_steps]
    return {
        "pairs": len(both),
        "same_text": sum(p[True].text == p[False].text for p in both),
        "drafts_over_plain_median": statistics.median(ratios) if ratios else None,
        "drafts_over_plain_geomean": statistics.geometric_mean(ratios) if ratios else None,
        "plain_tok_s_median": statistics.median(p[False].tok_s for p in both) if both else None,
        "drafts_tok_s_median": statistics.median(p[True].tok_s for p in both) if both else None,
        "drafting_steps": sum(p[True].draft_steps for p in both),
        "drafting_step_tokens": tokens,
        "drafting_step_realized_gain": tokens / plain_steps if plain_steps else None,
        "drafting_step_expected_gain": statistics.fmean(exp) if exp else None,
        # expected against measured: where a drafting step's gain went (tokens or time)
        "drafting_step_expected_tokens": sum(p[True].expected_tokens for p in both),
        "drafting_step_expected_plain_steps": sum(p[True].expected_plain_steps for p in both),
        "drafting_step_measured_plain_steps": plain_steps,
    }


def write(args: argparse.Namespace, runs: list[Run]) -> None:
    date = datetime.now(UTC).isoformat(timespec="seconds")
    info = run_info(args.model, "default")
    info |= {"date": date, "note": args.note, "tokens": args.tokens, "rounds": args.rounds}
    s = summary(runs)
    name = args.out or f"fim-drafts-{info['commit']}"
    RESULTS.mkdir(exist_ok=True)
    record = {"info": info, "summary": s, "runs": [asdict(r) for r in runs]}
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=1))
    lines = [f"# Drafts vs plain decoding, FIM requests sampled as llama.vim samples ({info['commit']})", "",
             f"{info['model']}, {info['cpu']}, {info['date']}. {args.note}", "",
             "| | |", "| --- | --- |"]
    lines += [f"| {k} | {v:.3f} |" if isinstance(v, float) else f"| {k} | {v} |" for k, v in s.items()]
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    print(json.dumps(s, indent=1))


if __name__ == "__main__":
    main()
