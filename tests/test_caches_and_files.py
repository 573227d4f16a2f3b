"""Files and caches the CLI touches: a FIFO in a corpus folder is skipped (not read for ever),
`complete --write` never overwrites edits saved meanwhile, the cost cache names the machine
by its CPU and writes through a temporary file of its own, and the backend probe decodes a
batch as large as the process's largest."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from lookahead.apps.complete import split_at_cursor, write_completion
from lookahead.backend import probe
from lookahead.errors import UserError
from lookahead.index.corpus_files import collect_files
from lookahead.tuning.calibrate import cost_machine, store_costs
from tests.safe_backend import safe_candidate


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_in_a_corpus_folder_is_skipped(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_text("def f():\n    return 1\n")
    os.mkfifo(tmp_path / "pipe.py")  # opening it for reading blocks until a writer comes
    found: list[list[str]] = []
    scan = threading.Thread(target=lambda: found.append([f.name for f in collect_files([tmp_path])]), daemon=True)
    scan.start()
    scan.join(10)
    if scan.is_alive():  # unblock the reader so the test process can end
        with open(tmp_path / "pipe.py", "w"):
            pass
        pytest.fail("the scan blocked on a FIFO")
    assert found == [[f"{tmp_path.name}/real.py"]]


def test_complete_write_refuses_a_file_changed_meanwhile(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("def f():\n    <CURSOR>\n")
    original = path.read_bytes()
    split = split_at_cursor(path.read_text(), marker="<CURSOR>")
    path.write_text("def f():\n    <CURSOR>\n# saved by the editor meanwhile\n")
    edited = path.read_bytes()
    with pytest.raises(UserError, match="changed while"):
        write_completion(path, split, "return 1", original)
    assert path.read_bytes() == edited
    path.write_bytes(original)
    write_completion(path, split, "return 1", original)
    assert path.read_text() == "def f():\n    return 1\n"


def test_the_cost_cache_key_names_the_cpu() -> None:
    key = cost_machine(2)
    assert key.startswith("2:") and probe.cpu_model() in key
    assert len(key.rsplit(":", 1)[1]) == 12  # a hash of the CPU's flags


def test_the_cost_cache_writes_through_a_temporary_file_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "costs.json"
    (tmp_path / "costs.tmp").mkdir()  # a fixed temporary name, taken (another process's)
    store_costs(path, "k", {"costs": {1: 0.02, 2: 0.03}})
    assert json.loads(path.read_text()) == {"k": {"costs": {"1": 0.02, "2": 0.03}}}
    assert [p.name for p in tmp_path.iterdir() if p.name != "costs.tmp"] == ["costs.json"]


@pytest.mark.model
def test_the_probe_decodes_the_largest_batch_the_process_uses(
    smol_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lookahead.backend.llama import BackendConfig, LlamaBackend

    sizes: list[int] = []
    real = LlamaBackend._decode

    def counting(self: LlamaBackend, n: int, stop: Any = None) -> None:
        sizes.append(n)
        real(self, n, stop)

    monkeypatch.setattr(LlamaBackend, "_decode", counting)
    # the candidate that runs here: the default one segfaults on a Xeon with AMX (the probe
    # runs it in a child process for that reason; this test runs it in its own)
    report = probe._child(str(smol_path), safe_candidate(smol_path).name, 1)
    assert report["ok"], report
    assert max(sizes) == BackendConfig().n_batch
