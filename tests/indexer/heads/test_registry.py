"""Head types are asked what they can do, not compared by name: the registry's capabilities
are read without loading torch, and every type carries its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from indexer.errors import InputError
from indexer.heads.registry import HEAD_TYPE_NAMES, capabilities, head_type


def test_capabilities_load_no_torch():
    code = (
        "import sys; from indexer.heads.registry import capabilities; "
        "assert capabilities('pair').scores_pairs; "
        "assert 'torch' not in sys.modules and 'numpy' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_each_type_carries_its_capabilities():
    for name in HEAD_TYPE_NAMES:
        assert head_type(name).capabilities == capabilities(name)
    assert [n for n in HEAD_TYPE_NAMES if capabilities(n).scores_spans] == ["ner"]
    assert [n for n in HEAD_TYPE_NAMES if capabilities(n).reviewable] == ["classifier"]
    with pytest.raises(InputError, match="unknown head type 'nope'"):
        capabilities("nope")
