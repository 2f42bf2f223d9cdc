"""Paths cannot escape the configured roots through `..` or symbolic links: `roots.store` holds
the store, `roots.data` every corpus file that is indexed (sources, `index` PATHS, inbox), and
an inbox folder is the root of its own files whether roots are configured or not.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from head_kit import head_args
from testkit import tiny_model_config

from flows.annotate import run_annotate
from indexer.annotate.inbox import inbox_entries
from indexer.config import Config, load_config
from indexer.errors import ConfigError, InputError
from indexer.indexing.run import run_index
from indexer.store import Store

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

SECRET = "the secret text outside every root"


@pytest.fixture
def tree(tmp_path):
    """root/ (data and stores) beside outside/ (a file nothing may read through a root)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "data").mkdir(parents=True)
    (root / "stores").mkdir()
    outside.mkdir()
    (outside / "secret.jsonl").write_text(json.dumps({"id": "s", "text": SECRET}) + "\n")
    (root / "data" / "good.jsonl").write_text(
        json.dumps({"id": "g", "text": "the cat sat on the mat"}) + "\n"
    )
    return root, outside


def load(tmp_path, data: dict) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


def test_roots_must_be_absolute(tmp_path):
    with pytest.raises(ConfigError, match=r"roots.data \(data\) must be an absolute path"):
        load(tmp_path, {"roots": {"data": "data"}})


def test_store_path_stays_under_roots_store(tmp_path, tree):
    root, outside = tree
    stores = str(root / "stores")
    ok = load(tmp_path, {"roots": {"store": stores}, "store": {"path": f"{stores}/main"}})
    assert ok.store.path == f"{stores}/main"
    with pytest.raises(
        ConfigError,
        match=r"store.path: .*/stores/\.\./\.\./outside/s resolves "
        r"to .*/outside/s, outside roots.store",
    ):
        load(tmp_path, {"roots": {"store": stores}, "store": {"path": f"{stores}/../../outside/s"}})
    (root / "stores" / "linked").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ConfigError, match="resolves through a link to .*outside roots.store"):
        load(tmp_path, {"roots": {"store": stores}, "store": {"path": f"{stores}/linked/s"}})
    with pytest.raises(ConfigError, match="outside roots.store"):  # --store is checked too
        ok.with_overrides(**{"store.path": str(outside / "s")})


def test_sources_stay_under_roots_data(tmp_path, tree):
    root, outside = tree
    data = str(root / "data")
    source = {"paths": [f"{data}/good.jsonl"], "collection": "c"}
    assert load(tmp_path, {"roots": {"data": data}, "sources": {"papers": source}}).sources
    escape = {"paths": [f"{data}/good.jsonl", f"{data}/../../outside/secret.jsonl"]}
    with pytest.raises(ConfigError, match=r"sources.papers.paths\[1\]: .* outside roots.data"):
        load(tmp_path, {"roots": {"data": data}, "sources": {"papers": escape}})
    (root / "data" / "link.jsonl").symlink_to(outside / "secret.jsonl")
    linked = {"paths": [f"{data}/link.jsonl"]}
    with pytest.raises(
        ConfigError,
        match=r"sources.papers.paths\[0\]: .*link.jsonl resolves "
        "through a link to .*secret.jsonl, outside roots.data",
    ):
        load(tmp_path, {"roots": {"data": data}, "sources": {"papers": linked}})
    annotate = {"interval": 60, "heads": ["heads/clf"], "inbox": str(outside)}
    with pytest.raises(ConfigError, match="schedules.annotate.inbox: .* outside roots.data"):
        load(tmp_path, {"roots": {"data": data}, "schedules": {"annotate": annotate}})


def test_index_reads_nothing_outside_roots_data(tiny_model_dir, tmp_path, tree):
    root, outside = tree
    data = root / "data"
    (data / "link.jsonl").symlink_to(outside / "secret.jsonl")
    config = tiny_model_config(tiny_model_dir, root / "stores" / "s", **{"roots.data": str(data)})
    for named in (
        outside / "secret.jsonl",
        data / ".." / ".." / "outside" / "secret.jsonl",
        data / "link.jsonl",
    ):
        with pytest.raises(InputError, match="outside roots.data"):
            run_index([str(named)], config)
    # a link found inside a named folder is skipped and recorded; the rest is indexed
    summary = run_index([str(data)], config)
    assert (summary["encoded"], summary["rejected"]) == (1, 1)
    refused = summary["rejections"][0]
    assert (Path(refused["source"]).name, refused["row"]) == ("link.jsonl", 0)
    assert "resolves through a link to" in refused["reason"] and "roots.data" in refused["reason"]
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        texts = [r[0] for r in store.con.execute("SELECT text FROM documents").fetchall()]
        recorded = store.con.execute("SELECT source, row_number FROM rejected").fetchall()
    assert texts == ["the cat sat on the mat"] and SECRET not in texts
    assert recorded == [(str(data / "link.jsonl"), 0)]


def test_inbox_refuses_links_that_leave_it(tiny_model_dir, heads, tmp_path, tree):
    root, outside = tree
    inbox = root / "data" / "inbox"
    inbox.mkdir()
    (inbox / "drop.jsonl").write_text(json.dumps({"id": "d", "text": "a dog on the rug"}) + "\n")
    (inbox / "evil.jsonl").symlink_to(outside / "secret.jsonl")
    (inbox / "alias.jsonl").symlink_to(inbox / "drop.jsonl")  # inside: the same file once
    found, refused = inbox_entries(inbox)
    assert [p.name for p in found] == ["drop.jsonl"]
    assert [(p.name, "copy the file into the inbox" in why) for p, why in refused] == [
        ("evil.jsonl", True)
    ]

    config = tiny_model_config(
        tiny_model_dir, root / "stores" / "s", **{"roots.data": str(root / "data")}
    )
    summary = run_annotate(head_args(heads), config, "inbox", inbox=str(inbox))
    assert summary["refused_files"] == 1 and summary["annotated"] == 1
    statuses = {Path(f["path"]).name: f["status"] for f in summary["files"]}
    assert statuses == {"evil.jsonl": "refused", "drop.jsonl": "done"}
    assert [(Path(r["source"]).name, r["row"]) for r in summary["rejections"]] == [
        ("evil.jsonl", 0)
    ]
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        texts = [r[0] for r in store.con.execute("SELECT text FROM documents").fetchall()]
    assert texts == ["a dog on the rug"]

    elsewhere = outside / "inbox"
    elsewhere.mkdir()
    with pytest.raises(InputError, match="--inbox .* outside roots.data"):
        run_annotate(head_args(heads), config, "inbox", inbox=str(elsewhere))
