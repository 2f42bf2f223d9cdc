"""The Python guide (docs/guides/python.md) runs as written: its examples are doctests, run in
a fresh interpreter in an empty folder with the packaged model, and afterwards neither Click,
Prefect nor the server's packages have been imported (the library's promise to notebooks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from testkit import ROOT

pytestmark = pytest.mark.slow  # the packaged model: ~20 s on 2 cores

GUIDE = ROOT / "docs" / "guides" / "python.md"
# what a notebook must not pay for: the CLI, the flows, the server and the project's layers
# over the library
NOT_LOADED = ("click", "prefect", "fastapi", "uvicorn", "starlette", "flows", "search")

SCRIPT = textwrap.dedent("""
    import doctest, json, sys
    guide, not_loaded = sys.argv[1], sys.argv[2].split(",")
    result = doctest.testfile(
        guide, module_relative=False, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    print(json.dumps({
        "attempted": result.attempted, "failed": result.failed,
        "loaded": sorted(m for m in not_loaded if m in sys.modules),
    }))
""")


def run_guide(tmp_path) -> tuple[dict, str]:
    """Run the guide's doctests in a fresh interpreter in `tmp_path`: (counts, doctest's report)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(GUIDE), ",".join(NOT_LOADED)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    *report, last = done.stdout.strip().splitlines()
    return json.loads(last), "\n".join(report)


def test_guide_examples_run_without_cli_flows_or_server(tmp_path):
    counts, report = run_guide(tmp_path)
    assert counts["failed"] == 0, report[-6000:]
    assert counts["attempted"] >= 30  # the examples were found (a broken fence runs none)
    assert counts["loaded"] == []
    assert (tmp_path / "heads" / "topic" / "run-receipt.json").is_file()  # it ran here, not in ROOT
