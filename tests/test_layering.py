"""The layering in pyproject.toml (`[tool.importlinter]`) holds: `indexer` imports neither
`flows`, `search`, Prefect, Click nor the web stack; `search.query`/`search.server` never
import flows; `flows` never imports `search`. Checked by import-linter's `lint-imports`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_import_contracts_are_kept():
    lint = Path(sys.executable).with_name("lint-imports")
    assert lint.is_file(), "import-linter is missing: pip install -e '.[dev]'"
    done = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          check=False,
                          timeout=300)
    report = done.stdout[done.stdout.find("Contracts"):] + done.stderr
    assert done.returncode == 0, report
    assert "0 broken" in done.stdout, report
