"""Bad input mixed with good, across JSONL, CSV and Parquet (`bad_corpus.py`, generated here):
exact counts of indexed and rejected records, every rejection in the `rejected` table with
file, row and reason, every good record found by its own text, NaN and nested metadata that
serialise as JSON, duplicate ids (first read wins, in a file, across files, across re-runs),
the document size limit, and `--strict` (a batch with a rejection stores none of its
documents, clean batches are stored, exit code 1).

Runs the library (`run_index`, the flow's plain-function twin) on the tiny random BERT; the
CLI's exit code comes from `index_errors`, tested on the summaries these runs return.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bad_corpus import write_bad_corpus
from click.testing import CliRunner
from testkit import tiny_model_config

from indexer.config import Config
from indexer.indexing.run import run_index
from indexer.ops.consistency import check_store
from indexer.query.searcher import Searcher
from indexer.store import Store
from search.cli.main import index_errors, main

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]


@pytest.fixture(scope="module")
def bad_input_run(tiny_model_dir, tmp_path_factory):
    """The bad corpus indexed once for the module: (its expected outcomes, config, summary)."""
    root = tmp_path_factory.mktemp("bad-input")
    corpus = write_bad_corpus(root / "corpus")
    config = tiny_model_config(tiny_model_dir, root / "store")
    summary = run_index([str(root / "corpus")], config, batch_size=8)
    return corpus, config, summary


def rejected_rows(config: Config, run_id: str) -> dict[tuple[str, int], str]:
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        rows = store.con.execute(
            "SELECT source, row_number, reason FROM rejected WHERE run_id = ?", [run_id]
        ).fetchall()
    return {(Path(source).name, row): reason for source, row, reason in rows}


def test_counts_and_every_rejection_with_file_row_and_reason(bad_input_run):
    corpus, config, summary = bad_input_run
    assert len(corpus.good) == 13 and len(corpus.rejected) == 35
    assert {k: summary[k] for k in ("read", "encoded", "skipped_unchanged", "rejected")} == {
        "read": 48,
        "encoded": 13,
        "skipped_unchanged": 0,
        "rejected": 35,
    }
    assert summary["failed_batches"] == [] and summary["refused_batches"] == []
    json.dumps(summary, allow_nan=False)  # what `index --json` prints: strict JSON

    table = rejected_rows(config, summary["run_id"])
    assert set(table) == set(corpus.rejected)
    wrong = {k: (corpus.rejected[k], table[k]) for k in table if corpus.rejected[k] not in table[k]}
    assert not wrong
    listed = {(Path(r["source"]).name, r["row"]): r["reason"] for r in summary["rejections"]}
    assert listed == table

    with Store(config.store.path, read_only=True) as store:
        stored = dict(store.con.execute("SELECT external_id, text FROM documents").fetchall())
    assert set(stored) == set(corpus.good)
    assert not check_store(config).problems


def test_metadata_nan_nested_and_timestamps_read_back_as_json(bad_input_run):
    corpus, config, _ = bad_input_run
    with Store(config.store.path, read_only=True) as store:
        rows = dict(store.con.execute("SELECT external_id, metadata FROM documents").fetchall())
        hits = Searcher(config, store).search("the cat sat on the mat", 20, mode="keyword")
    for doc_id, expected in corpus.metadata.items():
        if doc_id in rows:
            assert json.loads(rows[doc_id]) == expected, doc_id
    for h in hits:  # `search --json` output: strict JSON, no NaN
        json.dumps(h.to_dict(), allow_nan=False)


@pytest.mark.parametrize("mode", ["hybrid", "keyword", "dense"])
def test_every_good_record_is_found_by_its_own_text(bad_input_run, mode):
    """Hybrid (the default mode) and keyword: each good record is the first hit for its own
    text (title + text). Dense: the record is among the hits with the top score, which is the
    cosine of identical vectors (1.0): the tiny model's vocabulary maps Arabic and Hebrew
    words alike to [UNK], so g03 and g04 get one vector and tie; keyword ranking separates them.
    Keyword skips g05's emoji (not words) but finds its words."""
    corpus, config, _ = bad_input_run
    with Store(config.store.path, read_only=True) as store:
        searcher = Searcher(config, store)
        for doc_id, text in corpus.good.items():
            hits = searcher.search(text, 5, mode=mode)
            if mode == "dense":
                assert hits[0].score == pytest.approx(1.0, abs=1e-4), doc_id
                top = [h.id for h in hits if h.score >= hits[0].score - 1e-4]
                assert doc_id in top, (doc_id, [(h.id, h.score) for h in hits])
            else:
                assert hits and hits[0].id == doc_id, (doc_id, [(h.id, h.score) for h in hits])


def test_rerun_changes_nothing_and_keeps_the_first_duplicate(bad_input_run, tiny_model_dir):
    corpus, config, first = bad_input_run
    again = run_index([str(f) for f in corpus.files], config, batch_size=8)
    assert {k: again[k] for k in ("read", "encoded", "skipped_unchanged", "rejected")} == {
        "read": 48,
        "encoded": 0,
        "skipped_unchanged": 13,
        "rejected": 35,
    }
    assert again["index"]["version"] is None  # nothing changed: nothing published
    assert rejected_rows(config, again["run_id"]) == rejected_rows(config, first["run_id"])
    with Store(config.store.path, read_only=True) as store:
        g02 = store.con.execute(
            "SELECT count(*), any_value(text) FROM documents WHERE external_id = 'g02'"
        ).fetchone()
    assert g02 == (1, "the dog slept on the sofa")  # a.jsonl row 9, not b.csv row 3


def test_duplicates_within_and_across_files_in_one_run(tiny_model_dir, tmp_path):
    """First read wins, whatever the batch: a later record with a taken id is rejected,
    naming where the id was first read; the store holds one document per id."""
    (tmp_path / "one.jsonl").write_text(
        '{"id": "x", "text": "first x"}\n{"id": "y", "text": "first y"}\n'
        '{"id": "x", "text": "second x"}\n'
    )
    (tmp_path / "two.csv").write_text("id,text\ny,second y\nz,only z\nx,third x\n")
    config = tiny_model_config(tiny_model_dir, tmp_path / "store")
    summary = run_index(
        [str(tmp_path / "one.jsonl"), str(tmp_path / "two.csv")], config, batch_size=1
    )
    assert (summary["encoded"], summary["rejected"]) == (3, 3)
    reasons = sorted(
        (Path(r["source"]).name, r["row"], r["reason"].split(";")[0]) for r in summary["rejections"]
    )
    one = str(tmp_path / "one.jsonl")
    assert reasons == [
        ("one.jsonl", 3, "duplicate id 'x' (first at row 1)"),
        ("two.csv", 1, f"duplicate id 'y' (first at {one} row 2)"),
        ("two.csv", 3, f"duplicate id 'x' (first at {one} row 1)"),
    ]
    with Store(config.store.path, read_only=True) as store:
        docs = dict(store.con.execute("SELECT external_id, text FROM documents").fetchall())
    assert docs == {"x": "first x", "y": "first y", "z": "only z"}
    # a later run is an update, not a duplicate: its record replaces the stored one
    (tmp_path / "three.jsonl").write_text('{"id": "x", "text": "x, updated later"}\n')
    later = run_index([str(tmp_path / "three.jsonl")], config)
    assert (later["encoded"], later["rejected"]) == (1, 0)


def test_document_size_limit_is_configurable(tiny_model_dir, tmp_path):
    path = tmp_path / "sizes.jsonl"
    path.write_text(
        json.dumps({"id": "long", "title": "t", "text": "cat " * 30})
        + "\n"
        + json.dumps({"id": "short", "text": "the dog"})
        + "\n"
    )
    limited = tiny_model_config(
        tiny_model_dir, tmp_path / "s1", **{"long_documents.max_chars": 100}
    )
    summary = run_index([str(path)], limited)
    assert (summary["encoded"], summary["rejected"]) == (1, 1)
    assert summary["rejections"][0]["reason"].startswith(
        "document is 121 characters, over long_documents.max_chars (100)"
    )
    unlimited = tiny_model_config(
        tiny_model_dir, tmp_path / "s2", **{"long_documents.max_chars": 0}
    )
    summary = run_index([str(path)], unlimited)
    assert (summary["encoded"], summary["rejected"]) == (2, 0)
    assert summary["chunks"] >= 3  # the long one as overlapping windows


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def test_strict_stores_no_document_of_a_batch_with_a_rejection(tiny_model_dir, tmp_path):
    """Per batch: batches of 3; rows 4-6 of dirty.jsonl hold a broken line, so that batch
    stores only its rejection; the clean batches before and after it are stored."""
    clean = _write(
        tmp_path / "a_clean.jsonl",
        [{"id": f"a{i}", "text": f"the cat number {i}"} for i in range(4)],
    )
    dirty = _write(
        tmp_path / "b_dirty.jsonl",
        [{"id": f"b{i}", "text": f"the dog number {i}"} for i in range(3)]
        + [
            {"id": "b3", "text": "the dog 3"},
            '{"id": "b4", "text": ',
            {"id": "b5", "text": "the dog 5"},
            {"id": "b6", "text": "the dog 6"},
        ],
    )
    config = tiny_model_config(tiny_model_dir, tmp_path / "store")
    summary = run_index([str(clean), str(dirty)], config, batch_size=3, strict=True)
    assert [(r["batch"], r["records"], r["rejected"]) for r in summary["refused_batches"]] == [
        (f"{dirty} rows 4-6", 2, 1)
    ]
    assert (summary["read"], summary["encoded"], summary["rejected"]) == (11, 8, 1)
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        ids = {r[0] for r in store.con.execute("SELECT external_id FROM documents").fetchall()}
        status = store.con.execute(
            "SELECT status FROM runs WHERE run_id = ?", [summary["run_id"]]
        ).fetchone()[0]
    assert ids == {"a0", "a1", "a2", "a3", "b0", "b1", "b2", "b6"}
    assert status == "completed_with_failures"
    assert list(rejected_rows(config, summary["run_id"])) == [("b_dirty.jsonl", 5)]
    errors = index_errors(summary)
    assert errors and "--strict: batch" in errors[0] and "b_dirty.jsonl rows 4-6" in errors[0]
    assert "broken JSON" in errors[0] and "stored none of their 2 good record(s)" in errors[-1]
    assert not check_store(config).problems

    # the row fixed, the same command again: everything stored, nothing to report
    dirty.write_text(
        dirty.read_text().replace('{"id": "b4", "text": \n', '{"id": "b4", "text": "the dog 4"}\n')
    )
    fixed = run_index([str(clean), str(dirty)], config, batch_size=3, strict=True)
    assert (fixed["encoded"], fixed["skipped_unchanged"], fixed["refused_batches"]) == (3, 8, [])
    assert index_errors(fixed) == []


def test_strict_is_on_the_command_line_and_in_sources():
    result = CliRunner().invoke(main, ["index", "--help"])
    assert result.exit_code == 0 and "--strict" in result.output
    from indexer.config.flows import SourceConfig

    assert SourceConfig(paths=["x"], strict=True).strict is True


def test_on_missing_delete_never_deletes_behind_an_unreadable_row(tiny_model_dir, tmp_path):
    """A rejected row without a readable id may be any stored document: `on_missing: delete`
    then deletes nothing (and says why) rather than a document that is only damaged."""
    path = tmp_path / "docs.jsonl"
    config = tiny_model_config(tiny_model_dir, tmp_path / "store")
    _write(path, [{"id": k, "text": f"the {k} document"} for k in ("k1", "k2", "k3")])
    run_index([str(path)], config)
    _write(path, [{"id": "k1", "text": "the k1 document"}, '{"id": "k2", "text": "the k2'])
    damaged = run_index([str(path)], config, on_missing="delete")
    assert damaged["deleted"] == 0 and "row 2 has no readable id" in damaged["delete_skipped"]
    _write(path, [{"id": k, "text": f"the {k} document"} for k in ("k1", "k2")])
    fixed = run_index([str(path)], config, on_missing="delete")
    assert fixed["deleted"] == 1 and "delete_skipped" not in fixed
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        assert store.counts.documents() == 2


def test_unreadable_files_are_rejections_not_failed_runs(tiny_model_dir, tmp_path):
    """A damaged Parquet file and a gzip file cut short: each is one rejection (row 0 for the
    whole file, else the row where reading stopped) and the other files are bad_input_run."""
    import gzip

    _write(tmp_path / "a_good.jsonl", [{"id": "ok", "text": "the cat sat on the mat"}])
    (tmp_path / "b_damaged.parquet").write_bytes(b"PAR1" + b"\x00garbage" * 100)
    lines = "".join(
        json.dumps({"id": f"z{i}", "text": f"the dog {i} " + "word " * 40}) + "\n"
        for i in range(400)
    ).encode()
    packed = gzip.compress(lines)
    (tmp_path / "c_cut.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    config = tiny_model_config(tiny_model_dir, tmp_path / "store")
    summary = run_index([str(tmp_path)], config, batch_size=64)
    assert summary["failed_batches"] == []
    reasons = {Path(r["source"]).name: (r["row"], r["reason"]) for r in summary["rejections"]}
    assert reasons["b_damaged.parquet"][0] == 0
    assert reasons["b_damaged.parquet"][1].startswith("not a readable Parquet file")
    row, reason = reasons["c_cut.jsonl.gz"]
    assert row > 1 and reason.startswith(f"cannot read the file from row {row} on")
    assert summary["encoded"] == 1 + (row - 1) and summary["rejected"] == 2
