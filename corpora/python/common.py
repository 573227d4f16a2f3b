"""Common Python idioms, written out once so drafts can follow them.

This file is a drafting corpus, not a module: it is read as text and never imported.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import pytest

logger = logging.getLogger(__name__)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("input", type=Path, help="path to the input file")
    parser.add_argument("-o", "--output", type=Path, default=None, help="where to write the result")
    parser.add_argument("-n", "--num-workers", type=int, default=4, help="number of workers")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("-v", "--verbose", action="store_true", help="print more details")
    parser.add_argument("--dry-run", action="store_true", help="show what would be done")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not args.input.exists():
        logger.error("input file not found: %s", args.input)
        return 1
    result = process(args.input)
    if args.output is None:
        print(json.dumps(result, indent=2))
    else:
        args.output.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        logger.info("wrote %s", args.output)
    return 0


def process(path: Path) -> dict[str, Any]:
    counts: Counter[str] = Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            counts.update(line.split())
    return {"path": str(path), "total": sum(counts.values()), "top": counts.most_common(10)}


class Status(Enum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass
class Config:
    name: str
    batch_size: int = 32
    learning_rate: float = 1e-3
    tags: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        return cls(**data)

    @classmethod
    def from_json(cls, path: Path) -> Config:
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


@dataclass(frozen=True)
class Point:
    x: float
    y: float

    def __add__(self, other: Point) -> Point:
        return Point(self.x + other.x, self.y + other.y)

    def distance(self, other: Point) -> float:
        return ((self.x - other.x) ** 2 + (self.y - other.y) ** 2) ** 0.5


class Stack:
    def __init__(self) -> None:
        self._items: list[Any] = []

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self._items!r})"

    def push(self, item: Any) -> None:
        self._items.append(item)

    def pop(self) -> Any:
        if not self._items:
            raise IndexError("pop from empty stack")
        return self._items.pop()


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Yield successive chunks of `size` items."""
    for i in range(0, len(items), size):
        yield items[i : i + size]


def group_by(items: Iterable[Any], key: Any) -> dict[Any, list[Any]]:
    groups: defaultdict[Any, list[Any]] = defaultdict(list)
    for item in items:
        groups[key(item)].append(item)
    return dict(groups)


@cache
def fibonacci(n: int) -> int:
    if n < 2:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)


def read_lines(path: str | os.PathLike[str]) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
    tmp.replace(path)


def run(cmd: list[str], cwd: Path | None = None) -> str:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=True)
    return result.stdout.strip()


def retry(func: Any, attempts: int = 3, delay: float = 1.0) -> Any:
    for attempt in range(1, attempts + 1):
        try:
            return func()
        except Exception as exc:
            if attempt == attempts:
                raise
            logger.warning("attempt %d/%d failed: %s", attempt, attempts, exc)
            time.sleep(delay * 2 ** (attempt - 1))
    return None


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.elapsed = time.perf_counter() - self.start


def slugify(text: str) -> str:
    text = re.sub(r"[^\w\s-]", "", text.lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def normalize(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return (values - values.mean()) / (values.std() + 1e-12)


# ---- tests (pytest) ----


@pytest.fixture
def config() -> Config:
    return Config(name="test", batch_size=8)


@pytest.fixture
def sample_file(tmp_path: Path) -> Path:
    path = tmp_path / "sample.txt"
    path.write_text("alpha beta\nbeta gamma\n# comment\n", encoding="utf-8")
    return path


def test_config_round_trip(config: Config) -> None:
    assert Config.from_dict(config.to_dict()) == config


def test_process_counts_words(sample_file: Path) -> None:
    result = process(sample_file)
    assert result["total"] == 4
    assert result["top"][0] == ("beta", 2)


@pytest.mark.parametrize(
    ("n", "expected"),
    [
        (0, 0),
        (1, 1),
        (2, 1),
        (10, 55),
    ],
)
def test_fibonacci(n: int, expected: int) -> None:
    assert fibonacci(n) == expected


def test_pop_empty_raises() -> None:
    with pytest.raises(IndexError, match="empty"):
        Stack().pop()


def test_main_missing_input(tmp_path: Path) -> None:
    assert main([str(tmp_path / "missing.txt")]) == 1


def test_point_distance() -> None:
    assert Point(0, 0).distance(Point(3, 4)) == pytest.approx(5.0)


if __name__ == "__main__":
    sys.exit(main())
