"""Benchmark prompts, grouped by the kind of text they make the model write.

Kinds, from most to least copy-friendly:
- code_edit: a 15-40 line function or class plus a small change; the answer mostly copies it.
- report: a fixed section layout repeated for every data row.
- completion: raw HumanEval prompts (no chat template), a fixed subset of the 164 tasks.
- summarize: a 300-500 word document followed by a request for a summary.
- prose: open-ended writing with nothing to copy from.

Every prompt except the HumanEval ones was written for this benchmark; the summarize
documents (fictional, 300-500 words each) are the text files in `bench/texts/`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from bench.task import Task, humaneval

KINDS = ("code_edit", "report", "completion", "summarize", "prose")
TEXTS = Path(__file__).parent / "texts"


_CODE_EDIT = {
    "rename": (
        "Rename the variable `entries` to `records` everywhere in this function. Change "
        "nothing else and reply with the complete function only.",
        '''def parse_log_lines(lines, min_level="INFO"):
    """Parse 'LEVEL timestamp message' lines into dictionaries."""
    levels = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "ERROR": 40}
    threshold = levels[min_level]
    entries = []
    for raw in lines:
        raw = raw.strip()
        if not raw or raw.startswith("#"):
            continue
        parts = raw.split(" ", 2)
        if len(parts) < 3:
            continue
        level, stamp, message = parts
        if level not in levels:
            continue
        if levels[level] < threshold:
            continue
        entries.append({"level": level, "time": stamp, "message": message})
    entries.sort(key=lambda e: e["time"])
    by_level = {}
    for entry in entries:
        by_level.setdefault(entry["level"], []).append(entry)
    return entries, by_level
''',
    ),
    "type_hints": (
        "Add type hints to every method of this class (parameters and return types). Keep "
        "the code otherwise identical and reply with the complete class only.",
        '''class RateLimiter:
    """Allow at most `limit` calls per `window` seconds for each key."""

    def __init__(self, limit, window, clock):
        self.limit = limit
        self.window = window
        self.clock = clock
        self.calls = {}

    def _prune(self, key, now):
        recent = [t for t in self.calls.get(key, []) if now - t < self.window]
        self.calls[key] = recent
        return recent

    def allow(self, key):
        now = self.clock()
        recent = self._prune(key, now)
        if len(recent) >= self.limit:
            return False
        recent.append(now)
        return True

    def remaining(self, key):
        now = self.clock()
        return max(0, self.limit - len(self._prune(key, now)))

    def reset(self, key=None):
        if key is None:
            self.calls.clear()
        else:
            self.calls.pop(key, None)
''',
    ),
    "add_param": (
        "Add a parameter `min_gap: int = 0` to this function: two intervals are merged when "
        "the gap between them is at most `min_gap`. Update the docstring too, change nothing "
        "else, and reply with the complete function only.",
        '''def merge_intervals(intervals):
    """Merge overlapping [start, end] intervals and return them sorted by start.

    Intervals that merely touch (end == next start) are merged as well.
    """
    if not intervals:
        return []
    ordered = sorted(intervals, key=lambda pair: (pair[0], pair[1]))
    merged = [list(ordered[0])]
    for start, end in ordered[1:]:
        last = merged[-1]
        if start <= last[1]:
            if end > last[1]:
                last[1] = end
        else:
            merged.append([start, end])
    total = 0
    for start, end in merged:
        total += end - start
    return [tuple(pair) for pair in merged], total
''',
    ),
    "loop": (
        "Rewrite the index-based while loop in this function as a plain `for order in orders:` "
        "loop. Keep the behaviour and everything else the same, and reply with the complete "
        "function only.",
        '''def summarize_orders(orders, tax_rate=0.2):
    """Totals per customer and overall, from a list of order dictionaries."""
    per_customer = {}
    grand_total = 0.0
    largest = None
    i = 0
    while i < len(orders):
        order = orders[i]
        subtotal = 0.0
        for item in order["items"]:
            subtotal += item["price"] * item["quantity"]
        if order.get("coupon"):
            subtotal -= min(subtotal, order["coupon"])
        total = round(subtotal * (1 + tax_rate), 2)
        customer = order["customer"]
        per_customer[customer] = per_customer.get(customer, 0.0) + total
        grand_total += total
        if largest is None or total > largest[1]:
            largest = (order["id"], total)
        i += 1
    return {
        "per_customer": per_customer,
        "grand_total": round(grand_total, 2),
        "largest_order": largest,
    }
''',
    ),
}

_REPORT = {
    "servers": """For each of these 6 servers write a section with exactly this layout:

### <name>
- Region: <region>
- CPU: <cpu>%
- Memory: <memory>%
- Disk: <disk>%
- Status: <OK if every value is below 80, otherwise ATTENTION>
- Action: <one short sentence>

Servers (name, region, cpu, memory, disk):
web-01, eu-west, 42, 61, 55
web-02, eu-west, 87, 70, 58
db-01, us-east, 35, 91, 77
db-02, us-east, 29, 64, 83
cache-01, ap-south, 18, 49, 22
batch-01, ap-south, 95, 88, 67""",
    "stores": "Write a weekly summary for each of these 5 shops. Use exactly this layout "
    """for every shop, in the order given:

## Shop: <city>
| metric | value |
| --- | --- |
| revenue | <revenue> EUR |
| orders | <orders> |
| average order | <revenue divided by orders, 2 decimals> EUR |
| returns | <returns> |
Comment: <one sentence about the week>

Data (city, revenue, orders, returns):
Lyon, 18240, 412, 9
Porto, 9310, 240, 14
Ghent, 12775, 301, 3
Bologna, 15020, 377, 21
Tartu, 6480, 158, 2""",
    "releases": "Write release notes with one entry per package below. Every entry must "
    """follow this template exactly:

**<package>** <old version> -> <new version>
- Type: <major, minor or patch, from the version numbers>
- Change: <the change, rewritten as a full sentence>
- Upgrade: <"No action needed." for patch and minor, "Read the migration guide." for major>

Packages (package, old, new, change):
tidepool, 2.3.1, 2.3.2, fix crash on empty config file
quillmark, 0.9.4, 1.0.0, drop python 3.8 support
lanternfs, 1.12.0, 1.13.0, add read-only mount option
orchard-db, 3.0.7, 3.0.8, correct timezone handling in backups
pebblecli, 4.2.0, 5.0.0, rename --out flag to --output
mossgrid, 0.4.0, 0.5.0, new hexagonal layout mode""",
}

_SUMMARIZE = {  # text file in bench/texts/ -> the request that follows the document
    "postmortem": "Summarize this incident review in five bullet points.",
    "bike_lane": "Summarize this memo in one paragraph for a busy council member.",
    "naps": "Summarize the study above: what was done, what was found, and its limits.",
}

_PROSE = {
    "lighthouse": "Write a short story about a lighthouse keeper who finds an old radio that "
    "still receives a station nobody else can hear.",
    "tides": "Explain to a curious ten-year-old why the sea has tides, using an everyday "
    "comparison or two.",
    "letter": "Write a friendly letter from a retired gardener to a new neighbour, giving "
    "advice about the shared hedge and the fruit trees along the fence.",
    "essay": "Write a short essay on what people lose and gain when they stop using paper "
    "maps.",
}


def _text(name: str) -> str:
    return (TEXTS / f"{name}.txt").read_text(encoding="utf-8").strip()


def _tasks_of(kind: str) -> list[Task]:
    if kind == "code_edit":
        return [
            Task(f"code_edit/{name}", kind, f"{ask}\n\n```python\n{code}```")
            for name, (ask, code) in _CODE_EDIT.items()
        ]
    if kind == "report":
        return [Task(f"report/{name}", kind, text) for name, text in _REPORT.items()]
    if kind == "completion":
        return humaneval()
    if kind == "summarize":
        return [
            Task(f"summarize/{name}", kind, f"{_text(name)}\n\n{ask}")
            for name, ask in _SUMMARIZE.items()
        ]
    if kind == "prose":
        return [Task(f"prose/{name}", kind, text) for name, text in _PROSE.items()]
    raise ValueError(f"unknown kind {kind!r}; known: {', '.join(KINDS)}")


PROMPT_SETS = ("bench", "tune", "data", "pasted", "fresh")  # tune: bench/tasks_tune.py, for
# tuning apart from the bench; data: bench/tasks_data.py, reports with their data in many
# layouts (JSON, CSV, YAML, ...); pasted: bench/tasks_pasted.py, the tune set's code edits
# without fences; fresh: bench/tasks_fresh.py, held out, never tuned against


def load_tasks(
    kinds: Sequence[str] = KINDS, per_kind: int | None = None, prompt_set: str = "bench"
) -> list[Task]:
    """The prompts of the given kinds, in a fixed order; at most `per_kind` of each."""
    if prompt_set == "bench":
        tasks_of = _tasks_of
    elif prompt_set == "tune":
        from bench.tasks_tune import tasks_of  # imports a few stdlib modules to read them
    elif prompt_set == "data":
        from bench.tasks_data import tasks_of
    elif prompt_set == "pasted":
        from bench.tasks_pasted import tasks_of
    elif prompt_set == "fresh":
        from bench.tasks_fresh import tasks_of
    else:
        raise ValueError(f"unknown prompt set {prompt_set!r}; known: {', '.join(PROMPT_SETS)}")
    tasks: list[Task] = []
    for kind in kinds:
        tasks.extend(tasks_of(kind)[:per_kind])
    if not tasks:  # the data and pasted sets hold one kind each
        raise ValueError(f"the {prompt_set} set has no prompts of the kinds {', '.join(kinds) or '(none)'}")
    return tasks
