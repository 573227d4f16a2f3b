"""A second prompt set of the same kinds, for tuning (`--set tune`), so that the bench
prompts stay a test of what was tuned elsewhere.

Written apart from the bench prompts and never used to report speed: reports with other
layouts and data formats (semicolons, a markdown table, JSON lines, a header row, pipes),
code edits of Python standard-library functions, other HumanEval problems, the module
documentation of three standard-library modules to summarize, and other open prose.
The stdlib sources and docstrings are read from the running Python, so this set is only
comparable between runs on the same Python version.
"""

from __future__ import annotations

import argparse
import cmd
import difflib
import inspect
import shelve
import shlex
import statistics
import textwrap

from bench.task import Task, humaneval

HUMANEVAL_IDS = (3, 12, 25, 58, 101, 150)

_CODE_EDIT = {
    "shorten": (
        "Rename the parameter `width` to `line_width` everywhere in this function. "
        "Return the full updated function.",
        textwrap.shorten,
    ),
    "join": (
        "Add Python type hints to every parameter and the return value of this function. "
        "Return the whole function.",
        shlex.join,
    ),
    "median_low": (
        "Add a docstring to this function and keep the rest unchanged. Return the whole function.",
        statistics.median_low,
    ),
    "close_matches": (
        "Rename the local variable `result` to `out` and return the whole updated function.",
        difflib.get_close_matches,
    ),
}

# Short edits of code written here (not read from the running Python): the small
# renames, parameters and tidy-ups people ask for most, where most of the output is a
# copy of the input interrupted by the edit.
_CODE_EDIT_INLINE = {
    "rename_buf": (
        "Rename `buf` to `buffer` everywhere in this function. Return the whole function.",
        """def read_frames(stream, size):
    buf = bytearray()
    frames = []
    while True:
        chunk = stream.read(size)
        if not chunk:
            break
        buf.extend(chunk)
        while len(buf) >= 4:
            length = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + length:
                break
            frames.append(bytes(buf[4:4 + length]))
            del buf[:4 + length]
    return frames, bytes(buf)
""",
    ),
    "timeout_param": (
        "Add a `timeout` parameter (default 10.0 seconds) to `fetch_all` and pass it to every "
        "`session.get` call. Return the updated code.",
        """def fetch_all(session, urls, retries=3):
    results = {}
    for url in urls:
        for attempt in range(retries):
            try:
                response = session.get(url)
                response.raise_for_status()
                results[url] = response.json()
                break
            except ConnectionError:
                if attempt == retries - 1:
                    results[url] = None
    return results
""",
    ),
    "logging": (
        "Replace the print calls with calls to a module-level `logger` from the logging "
        "module (info for progress, warning for problems). Return the whole module.",
        """import csv


def load_prices(path):
    prices = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                prices[row["sku"]] = float(row["price"])
            except (KeyError, ValueError):
                print("skipping bad row:", row)
    print("loaded", len(prices), "prices from", path)
    return prices
""",
    ),
    "attr_rename": (
        "In this class, rename the attribute `self._data` to `self._items`. Return the whole class.",
        """class Stack:
    def __init__(self):
        self._data = []

    def push(self, value):
        self._data.append(value)

    def pop(self):
        if not self._data:
            raise IndexError("pop from an empty stack")
        return self._data.pop()

    def peek(self):
        return self._data[-1] if self._data else None

    def __len__(self):
        return len(self._data)
""",
    ),
    "early_return": (
        "Rewrite this function to use early returns instead of nested ifs. Keep the behaviour. "
        "Return the whole function.",
        """def shipping_cost(order):
    if order is not None:
        if order.items:
            if order.country == "US":
                cost = 5.0
            else:
                cost = 15.0
            if order.total > 100:
                cost = 0.0
            return cost
        else:
            return 0.0
    else:
        raise ValueError("no order")
""",
    ),
}

_REPORT = {
    "students": """Write a short progress note for each student below, using exactly this layout:

#### <student>
* Class: <class>
* Attendance: <attendance>%
* Average grade: <grade>/20
* Trend: <improving, stable or declining, from the last column>
* Advice: <one sentence>

Students (student, class, attendance, grade, trend):
Amira Haddad; 4B; 96; 15.5; up
Jonas Weber; 4B; 81; 11.0; down
Lea Martin; 4A; 99; 17.0; flat
Tomas Novak; 4A; 73; 9.5; down
Sofia Rossi; 4C; 90; 13.5; up""",
    "flights": """Create a status board entry for every flight in the table. Format each entry as:

Flight <code> to <destination>
  Gate: <gate>   Departure: <time>
  Status: <On time if delay is 0, otherwise Delayed by <delay> minutes>

| code | destination | gate | time | delay |
| --- | --- | --- | --- | --- |
| KL1204 | Amsterdam | B12 | 07:45 | 0 |
| LH0931 | Frankfurt | C3 | 08:10 | 25 |
| AF1580 | Paris | B7 | 08:30 | 0 |
| IB3214 | Madrid | D1 | 09:05 | 40 |
| SK0522 | Copenhagen | C9 | 09:20 | 0 |
| OS0412 | Vienna | A4 | 09:55 | 15 |""",
    "inventory": """For each product, write an inventory line block in this exact format:

Product: <name> (SKU <sku>)
In stock: <stock> units, reorder level <reorder>
Reorder now: <yes if stock is below the reorder level, otherwise no>

Data as JSON lines:
{"name": "Desk lamp", "sku": "DL-100", "stock": 42, "reorder": 20}
{"name": "Office chair", "sku": "OC-220", "stock": 8, "reorder": 10}
{"name": "Monitor arm", "sku": "MA-310", "stock": 15, "reorder": 12}
{"name": "Cable tray", "sku": "CT-045", "stock": 3, "reorder": 25}
{"name": "Footrest", "sku": "FR-077", "stock": 30, "reorder": 5}""",
    "recipes": """Write a recipe card for each dish, following this template exactly:

=== <dish> ===
Serves: <servings>
Time: <minutes> minutes
Main ingredient: <ingredient>
Difficulty: <easy under 30 minutes, medium under 60, otherwise hard>
Tip: <one short tip>

dish,servings,minutes,ingredient
Lentil soup,4,45,red lentils
Omelette,1,10,eggs
Roast chicken,6,95,chicken
Pesto pasta,2,20,basil
Ratatouille,4,70,aubergine""",
    "employees": """Produce an onboarding checklist for each new employee listed. Use this layout for every person:

Name: <name>
Team: <team>
Start date: <date>
Laptop: <laptop>
Buddy: <buddy>
First task: <one sentence suited to the team>

name | team | date | laptop | buddy
Nina Park | Data | 2026-01-05 | ThinkPad X1 | Omar
Raul Diaz | Web | 2026-01-12 | MacBook Air | Chen
Ivy Chen | Support | 2026-01-12 | ThinkPad T14 | Lars
Ben Ode | Data | 2026-01-19 | MacBook Pro | Nina
Kai Ito | Infra | 2026-02-02 | ThinkPad X1 | Raul""",
}

_SUMMARIZE = {  # module -> the request after its documentation
    "argparse": (argparse, "Summarize the documentation above in one paragraph."),
    "cmd": (cmd, "Summarize this module documentation in four bullet points."),
    "shelve": (shelve, "Summarize the text above for a developer who has never used the module."),
}

_PROSE = {
    "market": "Write a short story about a fishmonger who discovers a message in a bottle at "
    "the morning market.",
    "bridges": "Explain to a curious twelve-year-old why some bridges hang from cables while "
    "others rest on arches.",
    "complaint": "Write a polite complaint letter to a train company about a delayed night "
    "train and a lost reservation.",
}


def tasks_of(kind: str) -> list[Task]:
    if kind == "code_edit":
        return [
            Task(f"code_edit/{name}", kind, f"{ask}\n\n```python\n{inspect.getsource(fn)}```")
            for name, (ask, fn) in _CODE_EDIT.items()
        ] + [
            Task(f"code_edit/{name}", kind, f"{ask}\n\n```python\n{code}```")
            for name, (ask, code) in _CODE_EDIT_INLINE.items()
        ]
    if kind == "report":
        return [Task(f"report/{name}", kind, text) for name, text in _REPORT.items()]
    if kind == "completion":
        return humaneval(HUMANEVAL_IDS)
    if kind == "summarize":
        return [
            Task(f"summarize/{name}", kind, f"{inspect.cleandoc(module.__doc__ or '')}\n\n{ask}")
            for name, (module, ask) in _SUMMARIZE.items()
        ]
    if kind == "prose":
        return [Task(f"prose/{name}", kind, text) for name, text in _PROSE.items()]
    raise ValueError(f"unknown kind {kind!r}")
