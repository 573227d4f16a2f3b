"""A held-out prompt set (`--set fresh`): every kind, written after the controller and the
indexes were tuned, measured and never tuned against.

The other sets were each looked at while tuning: the bench prompts as the test, the tune,
data and pasted sets for tuning. These prompts are new, of the same kinds and in the styles
users send: code edits of pasted functions (a rename, a new parameter, type hints, a loop
made a comprehension, logging added), reports whose data is pretty-printed JSON, CSV or a
YAML list, HumanEval problems no other set uses, three fictional documents to summarize
and open prose. A result on them says how the tuning carries to prompts it never saw; if
they are ever used to tune, write another set.
"""

from __future__ import annotations

import json

from bench.task import Task, humaneval

HUMANEVAL_IDS = (9, 44, 77, 130)

_CODE_EDIT = {
    "rename_conn": (
        "Rename the variable `conn` to `connection` everywhere in this function.",
        '''def copy_table(conn, source, target, batch_size=500):
    cursor = conn.cursor()
    cursor.execute(f"SELECT * FROM {source}")
    columns = [d[0] for d in cursor.description]
    placeholders = ", ".join("?" for _ in columns)
    insert = f"INSERT INTO {target} ({', '.join(columns)}) VALUES ({placeholders})"
    copied = 0
    while True:
        rows = cursor.fetchmany(batch_size)
        if not rows:
            break
        conn.executemany(insert, rows)
        copied += len(rows)
    conn.commit()
    return copied
''',
    ),
    "encoding_param": (
        "Add an `encoding` parameter (default \"utf-8\") to `load_config` and use it for "
        "every file it opens.",
        '''import json
import os


def load_config(path, defaults=None):
    config = dict(defaults or {})
    if not os.path.exists(path):
        return config
    with open(path) as f:
        config.update(json.load(f))
    local = path + ".local"
    if os.path.exists(local):
        with open(local) as f:
            config.update(json.load(f))
    for key, value in list(config.items()):
        if isinstance(value, str) and value.startswith("@"):
            with open(value[1:]) as f:
                config[key] = f.read().strip()
    return config
''',
    ),
    "type_hints": (
        "Add type hints to this class and its methods. Change nothing else.",
        '''class LRUCache:
    def __init__(self, capacity):
        self.capacity = capacity
        self.items = {}
        self.order = []

    def get(self, key, default=None):
        if key not in self.items:
            return default
        self.order.remove(key)
        self.order.append(key)
        return self.items[key]

    def put(self, key, value):
        if key in self.items:
            self.order.remove(key)
        elif len(self.items) >= self.capacity:
            oldest = self.order.pop(0)
            del self.items[oldest]
        self.items[key] = value
        self.order.append(key)
''',
    ),
    "comprehension": (
        "Rewrite the loops in this function as list comprehensions where it keeps the code "
        "readable.",
        '''def active_emails(users, domain=None):
    active = []
    for user in users:
        if user.get("active"):
            active.append(user)
    emails = []
    for user in active:
        email = user["email"].strip().lower()
        if domain is None or email.endswith("@" + domain):
            emails.append(email)
    result = []
    for email in sorted(set(emails)):
        result.append(email)
    return result
''',
    ),
    "add_logging": (
        "Add logging to this function: a module-level logger, a debug message for each "
        "retry and an error message before the final exception is raised.",
        '''import time

import requests


def download(url, path, retries=3, backoff=2.0):
    for attempt in range(retries):
        try:
            response = requests.get(url, timeout=30)
            response.raise_for_status()
            with open(path, "wb") as f:
                f.write(response.content)
            return path
        except requests.RequestException:
            if attempt == retries - 1:
                raise
            time.sleep(backoff * (attempt + 1))
''',
    ),
}

_MACHINES = [
    {"host": "web-01", "role": "frontend", "cpu": 23, "memory_gb": 7.5, "disk_pct": 61, "alerts": 0},
    {"host": "web-02", "role": "frontend", "cpu": 88, "memory_gb": 14.1, "disk_pct": 64, "alerts": 2},
    {"host": "db-01", "role": "database", "cpu": 41, "memory_gb": 58.0, "disk_pct": 91, "alerts": 1},
    {"host": "cache-01", "role": "cache", "cpu": 12, "memory_gb": 30.2, "disk_pct": 15, "alerts": 0},
    {"host": "worker-01", "role": "batch", "cpu": 97, "memory_gb": 22.8, "disk_pct": 47, "alerts": 3},
    {"host": "worker-02", "role": "batch", "cpu": 35, "memory_gb": 9.6, "disk_pct": 52, "alerts": 0},
]

_REPORT = {
    "machines": "Write a health summary for every machine in the data below, in this format:\n\n"
    "## <host> (<role>)\n"
    "- CPU: <cpu>%\n"
    "- Memory in use: <memory_gb> GB\n"
    "- Disk: <disk_pct>% full\n"
    "- Open alerts: <alerts>\n"
    "- Verdict: <healthy, or what needs attention>\n\n"
    "Data:\n" + json.dumps(_MACHINES, indent=2),
    "invoices": """Write a payment reminder line block for each invoice, exactly like this:

Invoice <number> - <client>
Amount due: <amount> EUR, due on <due>
Status: <paid, or overdue if not paid and due before 2026-03-01, otherwise open>

number,client,amount,due,paid
INV-2031,Harbor Foods,1250.00,2026-02-10,no
INV-2032,Lindqvist AB,480.50,2026-02-18,yes
INV-2033,Café Moreau,96.00,2026-03-05,no
INV-2034,Orbit Labs,3100.00,2026-02-25,no
INV-2035,Greenway Ltd,742.25,2026-03-12,no
INV-2036,Studio Nine,215.00,2026-02-01,yes""",
    "courses": """For each course below, write a catalogue entry in this form:

Course: <code> - <title>
Teacher: <teacher>
Schedule: <day> at <time>, room <room>
Seats left: <seats>
Note: <one sentence for prospective students>

courses:
  - code: BIO101
    title: Cells and Genes
    teacher: Dr. Amal Farouk
    day: Monday
    time: "09:00"
    room: L2
    seats: 12
  - code: CHE205
    title: Organic Chemistry
    teacher: Dr. Piet de Vries
    day: Tuesday
    time: "11:00"
    room: L5
    seats: 0
  - code: PHY110
    title: Mechanics
    teacher: Dr. Grace Obi
    day: Wednesday
    time: "14:00"
    room: A1
    seats: 27
  - code: MAT230
    title: Linear Algebra
    teacher: Dr. Yuki Tanaka
    day: Thursday
    time: "10:00"
    room: B3
    seats: 5
  - code: CS120
    title: Programming in Python
    teacher: Dr. Marta Silva
    day: Friday
    time: "13:00"
    room: C2
    seats: 9""",
}

_SUMMARIZE = {
    "release": (
        """Release notes: Tidewater 4.2

Tidewater 4.2 is a maintenance release with two new features. Upgrading from 4.1 needs no
migration; upgrading from 3.x still requires running `tidewater migrate` once, as described
in the 4.0 notes.

New: scheduled exports. Any saved report can now be exported on a schedule, daily, weekly
or on the first day of the month, to a shared folder, an S3 bucket or an e-mail list. Each
schedule runs under the account of the user who created it, so it only ever sees the data
that user can see. Schedules that fail three times in a row are paused and their owner is
told by e-mail. The export formats are CSV, XLSX and PDF; PDF exports keep the report's
charts.

New: column-level permissions. Administrators can hide single columns of a dataset from a
group, for example salaries from everyone outside finance. A hidden column disappears from
tables, filters and exports alike; a chart that needs it shows a notice instead of the data.
Permissions are checked on the server, so the API respects them too.

Changed: the dashboard now loads its widgets in parallel. On our test instance with 40
widgets the median load time fell from 6.1 to 2.4 seconds. Widgets that depend on each other
still load in order.

Fixed: time zones in the date filter. Before 4.2, a filter set to "yesterday" used the
server's time zone instead of the user's, so users far from the server saw the wrong day.
The filter now uses the time zone from the user's profile.

Fixed: a memory leak in the importer. Large CSV imports (above about 2 million rows) could
exhaust the worker's memory and fail without a message. Imports now stream the file and
report progress.

Deprecated: the v1 API. It keeps working in 4.x but will be removed in 5.0. The v2 API has
offered the same endpoints since 3.6; the migration guide lists the three that changed
names.""",
        "Summarize these release notes in five bullet points for the people who use Tidewater "
        "every day.",
    ),
    "minutes": (
        """Minutes of the Elm Street Community Garden meeting, 14 March

Present: eleven members and the treasurer. Chair: Rosa Lindgren.

1. Water. The city has agreed to install a second tap at the north end of the garden before
the end of April. Until then, members with plots in the north rows may use the rain barrels
first and the main tap only on Tuesdays and Saturdays. Arjun Mehta will put up a sign.

2. Money. The garden has 1,340 euros in its account. Plot fees for the new season, 35 euros
per plot, are due by 15 April. The treasurer proposed raising the fee to 40 euros next year
to pay for new tools; the proposal was discussed and will be voted on at the June meeting,
not today, because several members were absent.

3. New plots. Four plots are free after two members moved away. There are seven people on
the waiting list. The free plots will go to the first four on the list; the others keep
their place. Plots not worked by the end of May will be offered to the waiting list as well,
after the owner has been asked twice.

4. Compost. The compost bins are full and the bottom layer is ready. A work morning to turn
and sieve the compost is planned for Saturday 29 March at 9:00; gloves and coffee will be
provided. Everyone who takes compost in the season is asked to come to at least one work
morning.

5. Children's day. The school across the street asked whether its pupils could visit in
May. Members agreed, as long as a teacher is present. Mei Chen will arrange the date and
prepare a small planting activity.

6. Other business. Someone has been leaving garden waste outside the gate. Members are
reminded that waste belongs in the green bin at the back. The next meeting is on 13 June.""",
        "Summarize these minutes for a member who could not attend: what was decided and what "
        "they need to do.",
    ),
    "policy": (
        """Remote work policy (revised January)

Who it applies to. This policy applies to all permanent employees who have completed their
probation period. Contractors follow the terms of their contracts. Employees on probation
may work remotely one day a week with their manager's agreement.

How much. Employees may work remotely up to three days a week. Teams agree on at least one
shared office day each week, so that everyone in a team is in the office together at least
once. Managers can approve more remote days for a limited time, for example during a move
or after an illness, for up to eight weeks.

Where. Remote work must be done from the country of the employee's contract. Working from
another country, even for a few days, needs written approval from HR at least four weeks in
advance, because of tax and insurance rules. Approval is usually given for up to 20 working
days a year.

Equipment. The company provides a laptop, a monitor and a headset. Employees can claim up
to 300 euros every three years for a desk or a chair, with receipts. The company does not
pay for internet access or electricity; the monthly allowance of 25 euros is meant to cover
part of these costs and is paid with the salary.

Availability. Remote employees keep the core hours of their team, normally 10:00 to 15:00,
and can be reached by chat and phone during them. Meetings with more than one remote
participant are held as video calls with cameras on when possible.

Security. Company data may only be stored on company devices. Public Wi-Fi may be used only
with the company VPN. Printed documents with personal or confidential data must not be taken
home. Lost or stolen devices must be reported to IT within 24 hours.

Review. Managers and employees review remote arrangements once a year, or earlier if either
side asks. This policy itself will be reviewed next January.""",
        "Summarize this policy in one paragraph for a new employee.",
    ),
}

_PROSE = {
    "lighthouse": "Write a short story about a lighthouse keeper whose lamp fails on the "
    "night a ship is expected.",
    "sourdough": "Explain to a beginner how sourdough bread rises without commercial yeast.",
    "apology": "Write a short, sincere apology email to a colleague for missing a meeting "
    "you had promised to lead.",
}


def tasks_of(kind: str) -> list[Task]:
    if kind == "code_edit":
        return [
            Task(f"code_edit/{name}", kind, f"{ask}\n\n```python\n{code}```")
            for name, (ask, code) in _CODE_EDIT.items()
        ]
    if kind == "report":
        return [Task(f"report/{name}", kind, text) for name, text in _REPORT.items()]
    if kind == "completion":
        return humaneval(HUMANEVAL_IDS)
    if kind == "summarize":
        return [Task(f"summarize/{name}", kind, f"{doc}\n\n{ask}") for name, (doc, ask) in _SUMMARIZE.items()]
    if kind == "prose":
        return [Task(f"prose/{name}", kind, text) for name, text in _PROSE.items()]
    raise ValueError(f"unknown kind {kind!r}")
