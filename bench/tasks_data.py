"""A prompt set of reports whose data comes in many layouts (`--set data`), for tuning the
record index on data as prompts really carry it.

Written apart from the bench and tune prompts, never used to report speed. Each prompt asks
for one section per record of a template, then gives the data (5-8 records) as one of:
pretty-printed JSON, JSON nested under a key, compact JSON, JSON Lines, CSV with quoted
fields, TSV, a markdown table, a YAML list, `key: value` blocks; and three harder cases:
data fields in another order than the template's, a template that renames the fields,
and numbers the report writes in another format (fractions as percentages, thousands).
Only the report kind has prompts here.
"""

from __future__ import annotations

import json

from bench.task import Task

_BOOKS = [
    {"title": "The Salt Road", "author": "Mara Quill", "year": 1987, "shelf": "H-12", "loanable": True},
    {"title": "Winter Orchard", "author": "Idris Vale", "year": 2004, "shelf": "F-03", "loanable": False},
    {"title": "Clockwork Tides", "author": "Anya Brook", "year": 2015, "shelf": "S-21", "loanable": True},
    {"title": "Paper Lanterns", "author": "Tomas Reed", "year": 1999, "shelf": "F-07", "loanable": True},
    {"title": "The Quiet Valley", "author": "Lena Moor", "year": 2021, "shelf": "N-02", "loanable": False},
    {"title": "Iron and Ivy", "author": "Cato Wren", "year": 1972, "shelf": "H-04", "loanable": True},
]

_TALKS = [
    {
        "slot": "09:00",
        "title": "Fast parsers in small languages",
        "speaker": "Rui Santos",
        "room": "Aula 1",
        "level": "advanced",
    },
    {"slot": "09:45", "title": "Testing without mocks", "speaker": "Hana Kato", "room": "Aula 2", "level": "beginner"},
    {
        "slot": "10:30",
        "title": "Memory layouts that scale",
        "speaker": "Ola Berg",
        "room": "Aula 1",
        "level": "intermediate",
    },
    {
        "slot": "11:15",
        "title": "Shipping a CLI people enjoy",
        "speaker": "Dara Njoku",
        "room": "Aula 3",
        "level": "beginner",
    },
    {
        "slot": "12:00",
        "title": "Profiling in production",
        "speaker": "Mika Laine",
        "room": "Aula 2",
        "level": "advanced",
    },
    {
        "slot": "13:30",
        "title": "Type checkers as design tools",
        "speaker": "Sven Aalto",
        "room": "Aula 1",
        "level": "intermediate",
    },
]


_REPORT = {
    "json_pretty": """Write a maintenance note for each weather station below, using exactly this layout:

## Station <station>
- Elevation: <elevation> m
- Battery: <battery> V
- Last reading: <last_reading>
- Needs visit: <yes if the battery is below 3.6, otherwise no>

```json
[
  {
    "station": "Kestrel Ridge",
    "elevation": 1420,
    "battery": 3.9,
    "last_reading": "2026-03-02 06:10"
  },
  {
    "station": "Mill Pond",
    "elevation": 85,
    "battery": 3.4,
    "last_reading": "2026-03-02 05:55"
  },
  {
    "station": "Salt Flats",
    "elevation": 12,
    "battery": 3.7,
    "last_reading": "2026-03-01 23:40"
  },
  {
    "station": "Pine Hollow",
    "elevation": 610,
    "battery": 3.5,
    "last_reading": "2026-03-02 06:05"
  },
  {
    "station": "Granite Pass",
    "elevation": 2230,
    "battery": 4.0,
    "last_reading": "2026-03-02 04:20"
  },
  {
    "station": "Harbor Light",
    "elevation": 4,
    "battery": 3.8,
    "last_reading": "2026-03-02 06:12"
  }
]
```""",
    "json_nested": """Summarize each vessel in the fleet file. For every vessel write:

### <name>
Type: <type>
Home port: <port>
Crew: <crew>
Length: <length> m
Remark: <one short sentence>

{
  "fleet": [
    {"name": "Northern Gannet", "type": "trawler", "port": "Aberdeen", "crew": 9, "length": 34},
    {"name": "Silver Tern", "type": "ferry", "port": "Oban", "crew": 14, "length": 52},
    {"name": "Morning Kelp", "type": "research", "port": "Tromso", "crew": 21, "length": 61},
    {"name": "Little Auk", "type": "pilot boat", "port": "Hull", "crew": 3, "length": 17},
    {"name": "Grey Seal", "type": "tug", "port": "Leith", "crew": 5, "length": 28}
  ]
}""",
    "json_compact": """Write a catalogue card for every book in the JSON below. Each card must look like this:

Title: <title>
Author: <author>
Year: <year>
Shelf: <shelf>
Loanable: <yes or no, from the loanable flag>
Blurb: <one sentence>

"""
    + json.dumps(_BOOKS, separators=(",", ":")),
    "jsonl": """Each line below is one conference talk. Write a schedule entry for each talk, exactly like this:

[<slot>] <title>
Speaker: <speaker>
Room: <room>
Level: <level>

"""
    + "\n".join(json.dumps(talk) for talk in _TALKS),
    "csv_quoted": """Write a short visitor card for each museum exhibit in the CSV. Use this layout for every exhibit:

*** <exhibit> ***
Hall: <hall>
Curator: <curator>
Opening hours: <hours>
Highlight: <one sentence>

exhibit,hall,curator,hours
"Maps of the North, 1600-1800",East Hall,"Berg, Anna",10:00-17:00
Bronze Age Tools,West Hall,"Okafor, James",09:00-16:00
"Glass, Light and Colour",Atrium,"Silva, Marta",10:00-18:00
Textiles of the Silk Road,East Hall,"Chen, Wei",11:00-17:00
"Clocks, Watches and Time",Tower Room,"Novak, Petra",10:00-16:30
Early Photography,West Hall,"Dubois, Luc",09:30-17:30""",
    "tsv": """The tab-separated table lists greenhouse plants. For every plant write:

#### <plant>
Bed: <bed>
Watering: every <days> days
Light: <light>
Care note: <one sentence>

plant\tbed\tdays\tlight
Basil\tA1\t2\tfull sun
Fern\tB4\t3\tshade
Tomato\tA2\t1\tfull sun
Orchid\tC1\t7\tbright indirect
Mint\tB2\t2\tpartial shade
Cactus\tC3\t14\tfull sun
Lettuce\tA3\t2\tpartial shade""",
    "markdown": """Make a rental status line block for every bike in the table, in this form:

Bike <id> (<model>)
  Station: <station>
  Rides this week: <rides>
  Service due: <yes if rides are above 40, otherwise no>

| id | model | station | rides |
|----|-------|---------|-------|
| B-101 | City Cruiser | Central Square | 34 |
| B-102 | Trail Hopper | River Park | 51 |
| B-103 | City Cruiser | Old Harbour | 12 |
| B-104 | Cargo Pro | Market Hall | 47 |
| B-105 | Trail Hopper | Central Square | 28 |
| B-106 | Cargo Pro | River Park | 39 |""",
    "yaml": """Below is a YAML list of hiking trails. For each trail write a card like this:

> <trail>
> Distance: <distance_km> km
> Climb: <climb_m> m
> Difficulty: <difficulty>
> Best season: <season>

trails:
  - trail: Eagle Crest Loop
    distance_km: 12.5
    climb_m: 640
    difficulty: hard
    season: summer
  - trail: Birch Meadow Walk
    distance_km: 4.2
    climb_m: 90
    difficulty: easy
    season: spring
  - trail: Three Lakes Path
    distance_km: 9.8
    climb_m: 310
    difficulty: moderate
    season: autumn
  - trail: Fox Valley Trail
    distance_km: 7.1
    climb_m: 220
    difficulty: easy
    season: autumn
  - trail: Storm Point Ascent
    distance_km: 15.0
    climb_m: 1120
    difficulty: hard
    season: summer""",
    "kv_blocks": """Write a delivery slip for each bakery order below. Every slip uses this layout:

ORDER <order>
Customer: <customer>
Items: <items>
Deliver at: <time>
Packing note: <one short sentence>

order: 5012
customer: Cafe Aurora
items: 40 croissants
time: 06:30

order: 5013
customer: Hotel Belmont
items: 12 baguettes
time: 06:45

order: 5014
customer: Green Leaf Deli
items: 25 rye rolls
time: 07:00

order: 5015
customer: St. Anne School
items: 60 muffins
time: 07:15

order: 5016
customer: Corner Market
items: 18 sourdough loaves
time: 07:30""",
    "reordered": """Write a fleet report entry for each van. Use exactly this layout (note the order of the lines):

Van <plate>
Driver: <driver>
Mileage: <mileage> km
Fuel: <fuel>
Next service: <next_service>

[
  {"next_service": "2026-04-10", "fuel": "diesel", "mileage": 48210, "driver": "Karl Jensen", "plate": "KJ-204"},
  {"next_service": "2026-03-22", "fuel": "electric", "mileage": 15630, "driver": "Ines Moreau", "plate": "IM-117"},
  {"next_service": "2026-05-01", "fuel": "diesel", "mileage": 90455, "driver": "Piotr Zielinski", "plate": "PZ-380"},
  {"next_service": "2026-03-30", "fuel": "petrol", "mileage": 33870, "driver": "Amal Haddad", "plate": "AH-052"},
  {"next_service": "2026-04-18", "fuel": "electric", "mileage": 8120, "driver": "Tess Olsen", "plate": "TO-611"}
]""",
    "renamed": """For each hotel write a review digest in this format:

Hotel: <hotel name>
City: <location>
Guest score: <score out of 10>
Rooms: <number of rooms>
Verdict: <one sentence>

hotels.json:
[
  {"hotel_name": "Hotel Lindenhof", "city": "Zurich", "rating": 8.7, "room_count": 64},
  {"hotel_name": "Casa Azul", "city": "Seville", "rating": 9.1, "room_count": 22},
  {"hotel_name": "The Wharf Inn", "city": "Bristol", "rating": 7.8, "room_count": 41},
  {"hotel_name": "Villa Serena", "city": "Lucca", "rating": 8.9, "room_count": 17},
  {"hotel_name": "Nordlys Lodge", "city": "Bodo", "rating": 8.2, "room_count": 35},
  {"hotel_name": "Maison Clair", "city": "Lyon", "rating": 8.4, "room_count": 50}
]""",
    "numbers": "Write a sales summary for each region. Show the share as a percentage and the revenue "
    """with a thousands separator, in exactly this layout:

== <region> ==
Revenue: $<revenue>
Share of total: <share>%
Growth: <growth>%
Outlook: <one sentence>

[
  {"region": "North", "revenue": 1284500, "share": 0.31, "growth": 0.042},
  {"region": "South", "revenue": 956200, "share": 0.23, "growth": -0.015},
  {"region": "East", "revenue": 1120750, "share": 0.27, "growth": 0.068},
  {"region": "West", "revenue": 498300, "share": 0.12, "growth": 0.011},
  {"region": "Central", "revenue": 290400, "share": 0.07, "growth": 0.093}
]""",
}


def tasks_of(kind: str) -> list[Task]:
    """The set's prompts of `kind`: reports only, other kinds have none here."""
    if kind == "report":
        return [Task(f"report/{name}", kind, text) for name, text in _REPORT.items()]
    return []
