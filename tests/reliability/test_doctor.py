"""`bertindex doctor` finds each kind of damage to a published index (deleted or truncated FAISS
file, ids out of step, another encoder's index, a bad CURRENT pointer, a damaged snapshot, an
out-of-step keyword index, unreachable rows, unpublished writes), and `--repair` rebuilds from
the store with the model taken away (so the encoder cannot have run): the same search results
as before the damage, and nothing left to report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import duckdb
import faiss
import numpy as np
import pytest
from click.testing import CliRunner
from damage_kit import search_results
from testkit import ROOT

from indexer.index.version_files import PROVENANCE_FILE, version_files
from indexer.ops.consistency import check_store
from indexer.records.versions import MANIFEST_FILE, index_root
from indexer.store import Store
from search.cli.main import main

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]


def doctor(indexed, *args):
    result = CliRunner().invoke(
        main, ["doctor", "--config", str(indexed.config_file), "--json", *args]
    )
    return result.exit_code, json.loads(result.stdout.strip().splitlines()[-1])


def truncate(path, keep=0.5):
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def base(folder):
    """The base file a version folder names."""
    return version_files(folder.parents[1], folder.name)["base"]


def foreign_ids(folder):
    """Same number of vectors, but one id the store does not have (one stored id lacking)."""
    index = faiss.read_index(str(base(folder)))
    ids = faiss.vector_to_array(index.id_map).copy()
    vectors = faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)  # by position
    ids[3] = 10**9
    swapped = faiss.index_factory(index.d, "IDMap2,Flat", faiss.METRIC_INNER_PRODUCT)
    swapped.add_with_ids(vectors, ids)
    faiss.write_index(swapped, str(base(folder)))


def segment(folder, table):
    """The oldest segment file of `table` in the snapshot of version `folder`."""
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    return folder.parent / "segments" / manifest["tables"][table]["segments"][0]["rows"]


def other_model(folder):
    info = json.loads((folder / PROVENANCE_FILE).read_text())
    info["provenance"] |= {"model_name": "some-other-model", "weights_hash": "0123456789abcdef"}
    (folder / PROVENANCE_FILE).write_text(json.dumps(info))


DAMAGE = {
    "deleted FAISS file": (lambda f: base(f).unlink(), {"index_file"}),
    "truncated FAISS file": (lambda f: truncate(base(f)), {"index_file"}),
    "FAISS file cut by 8 bytes": (lambda f: truncate(base(f), 0.999), {"index_file"}),
    "ids out of step": (foreign_ids, {"index_ids"}),
    "index of another model": (other_model, {"index_provenance"}),
    "CURRENT names a missing version": (
        lambda f: (f.parent / "CURRENT").write_text("v99"),
        {"pointer"},
    ),
    "CURRENT missing": (lambda f: (f.parent / "CURRENT").unlink(), {"pointer"}),
    "truncated snapshot segment": (lambda f: truncate(segment(f, "documents"), 0.3), {"snapshot"}),
    "deleted snapshot segment": (lambda f: segment(f, "chunks").unlink(), {"snapshot"}),
    "deleted snapshot manifest": (lambda f: (f / MANIFEST_FILE).unlink(), {"snapshot"}),
    "keyword manifest deleted": (
        lambda f: (f.parents[1] / "keyword" / "manifest.parquet").unlink(),
        {"keyword"},
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_doctor_finds_damage_and_repairs_it_without_the_encoder(indexed, damage):
    before = search_results(indexed.config)
    version = indexed.version_dir()
    code, report = doctor(indexed)
    assert (code, report["problems"]) == (0, []), report  # a healthy store passes

    damage_fn, expected = DAMAGE[damage]
    damage_fn(version)
    code, report = doctor(indexed)
    assert code == 1
    assert {p["check"] for p in report["problems"]} == expected, report["problems"]
    if damage.startswith(("truncated snapshot", "deleted snapshot segment")):
        table = "documents" if damage.startswith("truncated") else "chunks"
        assert segment(version, table).name in report["problems"][0]["message"]
    for p in report["problems"]:
        assert p["repairable"] and "bertindex doctor --repair" in p["fix"]
        assert str(indexed.store) in p["path"]

    indexed.remove_model()  # encoding anything from here on fails
    code, report = doctor(indexed, "--repair")
    assert code == 0, report
    assert report["remaining"] == [] and report["repair"]["encoded"] == 0
    if expected & {"index_file", "index_ids", "index_provenance", "pointer", "snapshot"}:
        assert report["repair"]["index"]["rebuilt"] is True
        assert report["repair"]["index"]["version"] != version.name
    indexed.restore_model()
    assert search_results(indexed.config) == before
    assert check_store(indexed.config).problems == []
    with Store(indexed.store, read_only=True, snapshot=False) as store:
        runs = store.runs.last(1)
    assert runs[0]["kind"] == "doctor" and runs[0]["encoded"] == 0


def test_repair_in_a_fresh_process_needs_no_model(indexed):
    """The CLI as users run it: a new process, the FAISS file gone, the model gone. A search
    fails for want of the model (so anything that encodes would); doctor --repair does not."""
    before = search_results(indexed.config)
    base_file = indexed.base_file()
    base_file.unlink()
    indexed.remove_model()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "search.cli.main", *args, "--config", str(indexed.config_file)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=300,
            check=False,
        )

    searched = cli("search", "cat", "--mode", "keyword")
    assert searched.returncode == 1
    assert f"its base {base_file} missing" in searched.stderr
    assert "doctor --repair" in searched.stderr
    repaired = cli("doctor", "--repair", "--json")
    assert repaired.returncode == 0, repaired.stderr
    report = json.loads(repaired.stdout)
    assert report["repair"]["encoded"] == 0 and report["remaining"] == []
    assert [p["check"] for p in report["problems"]] == ["index_file"]
    encoded = cli("search", "cat", "--mode", "dense")
    assert encoded.returncode == 1 and "is not a directory" in encoded.stderr  # no model
    indexed.restore_model()
    assert search_results(indexed.config) == before


def test_unpublished_writes_and_unreachable_rows_are_repaired(indexed):
    """Writes committed but never published (a run stopped before its index step), plus rows
    no search can reach: reported, then deleted/published by the repair."""
    with Store(indexed.store) as store:
        deleted, _ = store.documents.delete("default", external_ids=["d3"])
        store.con.execute("INSERT INTO chunks VALUES (999999, 888888, 0, 0, 3, 3)")
        store.con.execute("INSERT INTO vectors SELECT 999999, embedding FROM vectors LIMIT 1")
    assert deleted == ["d3"]
    code, report = doctor(indexed)
    assert code == 1
    assert {p["check"] for p in report["problems"]} == {
        "index_ids",
        "index_version",
        "keyword",
        "unreachable",
    }
    indexed.remove_model()
    code, report = doctor(indexed, "--repair")
    assert code == 0 and report["remaining"] == []
    assert report["repair"]["unreachable"] == {"chunks": 1, "vectors": 1}
    assert report["repair"]["keyword"]["removed"] == 1
    indexed.restore_model()
    assert check_store(indexed.config).problems == []
    hits = search_results(indexed.config)
    assert all(doc != "d3" for mode in hits.values() for q in mode for doc, _ in q)


def test_what_needs_encoding_is_reported_not_repaired(indexed):
    """A chunk whose vector is gone cannot be rebuilt without the encoder: exit 1, the fix
    names the document and the commands; --repair changes nothing."""
    with Store(indexed.store) as store:
        store.con.execute(
            "DELETE FROM vectors WHERE chunk_id = (SELECT min(chunk_id) FROM "
            "chunks c JOIN documents d USING (doc_id) WHERE d.external_id = 'd5')"
        )
    for args in ((), ("--repair",)):
        code, report = doctor(indexed, *args)
        assert code == 1
        [problem] = report["remaining"]
        assert problem["check"] == "store" and not problem["repairable"]
        assert "default/d5" in problem["message"] and "bertindex delete" in problem["fix"]
        assert report["repair"] is None
    result = CliRunner().invoke(main, ["doctor", "--config", str(indexed.config_file)])
    assert result.exit_code == 1
    assert "problem [store]" in result.stderr and "default/d5" in result.stderr


def test_doctor_text_output_and_healthy_exit(indexed):
    result = CliRunner().invoke(main, ["doctor", "--config", str(indexed.config_file)])
    assert result.exit_code == 0, result.output
    assert "ok: the store and its indexes agree" in result.stdout
    assert "40 documents" in result.stdout
    base_file, version = indexed.base_file(), indexed.version_dir().name
    base_file.unlink()
    result = CliRunner().invoke(main, ["doctor", "--config", str(indexed.config_file)])
    assert result.exit_code == 1
    named = f"the base index that version {version} names"
    assert f"problem [index_file] {base_file}: missing ({named})" in result.stderr
    assert "bertindex doctor --repair" in result.stderr
    result = CliRunner().invoke(main, ["doctor", "--repair", "--config", str(indexed.config_file)])
    assert result.exit_code == 0, result.output
    assert "0 encoded" in result.stdout and "ok:" in result.stdout


def test_newer_schema_is_reported_and_left_alone(indexed):
    db = indexed.store / "store.duckdb"
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    for args in ((), ("--repair",)):
        code, report = doctor(indexed, *args)
        assert code == 1
        [problem] = report["remaining"]
        assert problem["check"] == "schema" and not problem["repairable"]
        assert problem["path"] == str(db) and "upgrade bertindex" in problem["message"]
    with duckdb.connect(str(db), read_only=True) as con:
        assert (
            con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "99"
        )
    assert index_root(indexed.store).joinpath("CURRENT").read_text() == indexed.version_dir().name


def test_ids_and_vectors_survive_a_repair(indexed):
    """The rebuilt index holds exactly the stored chunk ids with the stored vectors."""
    indexed.base_file().unlink()
    code, _ = doctor(indexed, "--repair")
    assert code == 0
    index = faiss.read_index(str(indexed.base_file()))
    # a base is a plain IDMap (no reverse map): its ids, and its vectors by position
    held = faiss.vector_to_array(index.id_map)
    by_position = faiss.downcast_index(index.index).reconstruct_n(0, index.ntotal)
    where = {int(chunk_id): row for row, chunk_id in enumerate(held)}
    with Store(indexed.store, read_only=True, snapshot=False) as store:  # embeddings: live only
        for ids, vectors in store.vectors.iter_batches():
            np.testing.assert_array_equal(by_position[[where[int(i)] for i in ids]], vectors)
        assert index.ntotal == len(held) == store.counts.chunks() == len(where)
