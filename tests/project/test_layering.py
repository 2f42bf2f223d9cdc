"""The layering in pyproject.toml (`[tool.importlinter]`) holds: `indexer` imports neither
`flows`, `search`, Prefect, Click nor the web stack; inside `indexer` the packages import
downward only (`library-layers`, README "Layers"); the server and its client never import flows
or the CLI; `search --server`'s client imports no model, index or store; `flows` never imports
`search`. Checked by import-linter's `lint-imports`, and shown to fail on an upward import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testkit import ROOT


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.is_file(), "import-linter is missing: pip install -e '.[dev]'"
    done = subprocess.run(
        [str(lint), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    report = done.stdout[done.stdout.find("Contracts") :] + done.stderr
    assert done.returncode == 0, report
    assert "0 broken" in done.stdout, report


def test_an_upward_import_breaks_the_layers(tmp_path):
    """A copy of the tree where a record module imports the store (records sit below it), or
    the store imports a job above it from inside a function: `lint-imports` must refuse both."""
    import shutil

    for name in ("indexer", "flows", "search"):
        shutil.copytree(
            ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__", "static")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with open(tmp_path / "indexer" / "records" / "annotations.py", "a") as fh:
        fh.write("\nfrom indexer.store import Store  # noqa: E402\n")
    with open(tmp_path / "indexer" / "store" / "runs.py", "a") as fh:
        fh.write("\n\ndef _hidden():\n    from indexer.dedup import groups\n    return groups\n")
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run(
        [str(lint), "--no-cache", "--contract", "library-layers"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode != 0, done.stdout
    assert "indexer.records.annotations -> indexer.store" in done.stdout
    assert "indexer.store.runs -> indexer.dedup.groups" in done.stdout
