"""Helpers for the damage, doctor and concurrency tests: a small store indexed with the tiny
random BERT (the model copied beside it, so that a test can take it away), its config file,
search results to compare, and the published version's files."""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml
from testkit import TINY_WORDS, tiny_model_config

from indexer.config import Config
from indexer.index.version_files import version_files
from indexer.indexing.run import run_index
from indexer.query.searcher import Searcher
from indexer.records.versions import current_version, version_dir
from indexer.store import Store

QUERIES = [
    "the cat sat on the mat",
    "red apple river",
    "parse python file",
    "slow train city",
    "gzip compress data",
]


def write_corpus(path: Path, n: int = 40, seed: int = 3, prefix: str = "d") -> Path:
    """`n` JSONL records of tiny-vocabulary words; every 9th is long (several chunks)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        words = rng.choices(TINY_WORDS, k=rng.randint(4, 40 if i % 9 == 0 else 10))
        rows.append({"id": f"{prefix}{i}", "text": " ".join(words), "group": str(i % 3)})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@dataclass
class Indexed:
    config: Config
    config_file: Path  # the same configuration as YAML, for the CLI
    model: Path  # this store's copy of the tiny model
    source_model: Path  # the session's tiny model, to put the copy back
    corpus: Path

    @property
    def store(self) -> Path:
        return Path(self.config.store.path)

    def version_dir(self) -> Path:
        return version_dir(self.store, current_version(self.store))

    def base_file(self) -> Path:
        """The base FAISS file the current version maps (shared, under index/bases/)."""
        return version_files(self.store, current_version(self.store))["base"]

    def remove_model(self) -> None:
        """Take the model away and forget the loaded one: anything that encodes now fails."""
        from indexer.encode.encoder import load_encoder, weights_hash

        shutil.rmtree(self.model)
        load_encoder.cache_clear()
        weights_hash.cache_clear()

    def restore_model(self) -> None:
        if not self.model.exists():
            shutil.copytree(self.source_model, self.model)


def index_store(tiny_model_dir: Path, root: Path, n: int = 40) -> Indexed:
    """Index `n` generated records into `root/store` (batches of 16) and return it."""
    model = root / "model"
    shutil.copytree(tiny_model_dir, model)
    cfg = tiny_model_config(model, root / "store")
    config_file = root / "config.yaml"
    config_file.write_text(
        yaml.safe_dump(
            {
                "model": {"name": str(model), "dtype": "fp32", "device": "cpu", "max_length": 16},
                "long_documents": {"stride": 4},
                "store": {"path": str(root / "store")},
            }
        )
    )
    corpus = write_corpus(root / "docs.jsonl", n)
    summary = run_index([str(corpus)], cfg, batch_size=16)
    assert summary["encoded"] == n and summary["chunks"] > n  # long records: several chunks
    return Indexed(cfg, config_file, model, tiny_model_dir, corpus)


def search_results(cfg: Config, modes=("dense", "hybrid")) -> dict:
    """{mode: [[(id, score)] per query]}: scores exact, so equal means the same index."""
    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store)
        return {
            mode: [
                [(h.id, h.score) for h in hits]
                for hits in searcher.search_many(QUERIES, 5, mode=mode)
            ]
            for mode in modes
        }
