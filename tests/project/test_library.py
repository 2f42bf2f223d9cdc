"""The library promise (`indexer/__init__.py`): a corpus is indexed and searched from plain
Python (a notebook) without Prefect, Click or the CLI being imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from testkit import ROOT

pytestmark = pytest.mark.heavy

SCRIPT = textwrap.dedent("""
    import json, sys
    from indexer.config import Config
    from indexer.indexing.run import run_index
    from indexer.store import Store
    from indexer.query.searcher import Searcher

    model, corpus, store = sys.argv[1:4]
    config = Config().with_overrides(**{
        "model.name": model, "model.dtype": "fp32", "model.device": "cpu",
        "model.max_length": 16, "long_documents.stride": 4, "store.path": store})
    summary = run_index([corpus], config, collection="docs")
    with Store(config.store.path, read_only=True) as opened:
        hits = Searcher(config, opened).search("the cat sat on the mat", 3, mode="dense")
    print(json.dumps({
        "encoded": summary["encoded"], "top": hits[0].id,
        "loaded": sorted(m for m in ("prefect", "click", "fastapi", "uvicorn", "flows")
                         if m in sys.modules),
    }))
""")


def test_index_and_search_without_prefect(tiny_model_dir, small_corpus, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            SCRIPT,
            str(tiny_model_dir),
            str(small_corpus),
            str(tmp_path / "store"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["encoded"] == 5
    assert out["top"] == "a1"  # a stored text finds itself first
    assert out["loaded"] == []  # neither Prefect nor the CLI's packages came along
