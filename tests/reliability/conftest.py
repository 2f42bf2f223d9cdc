"""The stores the damage, doctor and concurrency suites start from: the tiny random BERT's
corpus indexed into tmp (`damage_kit.index_store`), the model copied beside it so that a test
can take it away."""

from __future__ import annotations

import pytest
from damage_kit import Indexed, index_store


@pytest.fixture
def indexed(tiny_model_dir, tmp_path) -> Indexed:
    """A published store of 40 documents, its config file, and the model it was built with."""
    return index_store(tiny_model_dir, tmp_path)


@pytest.fixture
def small_indexed(tiny_model_dir, tmp_path) -> Indexed:
    """The same with 20 documents: the concurrency tests run whole index runs against it."""
    return index_store(tiny_model_dir, tmp_path, n=20)
