"""The drafter and controller replayed on sampled fill-in-the-middle outputs, in seconds.

    python -m bench.fim_replay --record            # sample and store the outputs (minutes)
    python -m bench.fim_replay                     # replay them (seconds)
    python -m bench.fim_replay --config min_gain=1.25
    python -m bench.fim_replay --real              # the same requests decoded for real (minutes)

`bench/replay.py` replays greedy outputs; this replays an editor's sampled ones. A drafted
token is accepted when it is the token the sampler draws, and with the same seed the draw
does not depend on the drafts (`lookahead.core.sampling`), so a stored plain output answers
any drafting configuration as the model would have, up to a batched kernel moving a draw.
The requests are `bench/fim_drafts.py`'s (8 cursor places, llama.vim's sampling, end tokens
banned), `--seeds` outputs per place, replayed in order with one controller, as a server
learns across requests. Time is modeled: each step costs t(n + 1) at its depth in the cache,
from this machine's calibrated curve; plain decoding one token per step at the same depths.

The model is kinder to drafts than the machine: on a 2-vCPU AMD EPYC (AVX-512), the stored
32 requests replayed at geomean 1.19x where `--real` (drafts against plain decoding, both
run, in one process, same seeds) measured 1.09x; the clock leaves out the Python side of a
step and the controller's own cost model learns from the real steps. Use it to compare
drafting configurations with each other, and `--real` or `bench/fim_drafts.py` for speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sysconfig
from pathlib import Path

from bench.fim_drafts import llama_vim_sampling, no_end, places
from bench.replay import _config, modeled_clock, replay_request
from lookahead.api import load
from lookahead.core.control import CostModel
from lookahead.core.draft_state import DraftConfig
from lookahead.server.fim import fim_tokens_and_sources

OUTPUTS = Path(__file__).parent / "results" / "fim-sampled-outputs.json"
N_CTX = 4096


def requests(model, n_tokens):
    for place, prefix, suffix, extra in places(Path(sysconfig.get_paths()["stdlib"])):
        yield place, lambda p=prefix, s=suffix, e=extra: fim_tokens_and_sources(
            model, p, s, extra=e, n_ctx=N_CTX, n_predict=n_tokens
        )


def record(model, seeds: int, n_tokens: int) -> None:
    vocab = model.vocab
    banned = no_end(vocab)
    runs = []
    for place, make in requests(model, n_tokens):
        for seed in range(seeds):
            tokens, _ = make()
            sampling = llama_vim_sampling(seed, vocab, banned)
            plain = DraftConfig(enabled=False)
            r = model.generate("", tokens=tokens, sampling=sampling, max_tokens=n_tokens, draft=plain)
            runs.append({"place": place, "seed": seed, "tokens": r.tokens})
            print(f"{place} seed {seed}: {r.text[:60]!r}", flush=True)
    OUTPUTS.write_text(json.dumps({"model": model.name, "tokens": n_tokens, "runs": runs}))


def replay(model, config: DraftConfig, verbose: bool = False) -> list[float]:
    stored = json.loads(OUTPUTS.read_text())
    calibration = model.tuning.calibrate()
    slope = model.tuning.cost_slope
    cost = modeled_clock(calibration, slope)

    made = dict(requests(model, stored["tokens"]))
    state = model.drafting
    state.controllers.clear()
    state.cost = CostModel(calibration, slope=slope)
    ratios = []
    tokens_drafting = plain_steps_drafting = 0.0
    for run in stored["runs"]:
        out = run["tokens"]
        prompt, sources = made[run["place"]]()
        result, plain_s, steps = replay_request(model, prompt, out, config, cost, sources)
        for step in steps:
            if step.drafted:
                tokens_drafting += len(step.tokens)
                plain_steps_drafting += step.verify_s / cost(1, len(prompt) + 1)
        ratios.append(plain_s / result.stats.decode_s)
        if verbose:
            print(f"{run['place']:28s} seed {run['seed']} {ratios[-1]:5.2f}x steps {result.stats.steps}")
    gain = tokens_drafting / plain_steps_drafting if plain_steps_drafting else float("nan")
    print(f"geomean {statistics.geometric_mean(ratios):.3f}  median {statistics.median(ratios):.3f}  "
          f"min {min(ratios):.2f}  drafting steps' gain {gain:.3f}  ({len(ratios)} requests)")
    return ratios


def real(model) -> list[float]:
    """The stored requests decoded for real, plainly and with drafts, same seeds, in order."""
    stored = json.loads(OUTPUTS.read_text())
    made = dict(requests(model, stored["tokens"]))
    vocab = model.vocab
    banned = no_end(vocab)
    model.tuning.calibrate()
    model.drafting.controllers.clear()
    ratios = []
    for run in stored["runs"]:
        sampling = llama_vim_sampling(run["seed"], vocab, banned)
        speed = {}
        for drafts in (False, True):
            prompt, sources = made[run["place"]]()
            r = model.generate("", tokens=prompt, sampling=sampling, max_tokens=stored["tokens"], sources=sources,
                               draft=DraftConfig(enabled=drafts))
            speed[drafts] = r.stats.tokens_per_s
        ratios.append(speed[True] / speed[False])
        print(f"{run['place']:28s} seed {run['seed']} {ratios[-1]:5.2f}x", flush=True)
    print(f"real: geomean {statistics.geometric_mean(ratios):.3f}  median {statistics.median(ratios):.3f}")
    return ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--record", action="store_true")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--config", action="append", default=[], help="DraftConfig field=value")
    ap.add_argument("--real", action="store_true", help="decode the stored requests for real, drafts vs plain")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    model = load(args.model)
    if args.record:
        record(model, args.seeds, args.tokens)
    if args.real:
        real(model)
    else:
        replay(model, _config(args.config), args.verbose)


if __name__ == "__main__":
    main()
