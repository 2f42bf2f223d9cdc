"""Files known unchanged (`indexer.store.sources`): an index run skips a file whose bytes and
reading settings are those a run recorded after reading it whole, and the store ends exactly
as if the file had been read: duplicates across files, deletions, changes by other runs,
failed batches and `on_missing: delete` all still behave as a full read does."""

import json
import os

import duckdb
import pytest

from indexer.indexing.run import Steps, encode_texts_for_index, run_delete, run_index
from indexer.store import Store


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def texts(cfg) -> dict[str, str]:
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        rows = store.con.execute("SELECT external_id, text FROM documents").fetchall()
    return dict(rows)


def recorded(cfg) -> list[str]:
    with Store(cfg.store.path, read_only=True, snapshot=False) as store:
        return [os.path.basename(r["path"]) for r in store.sources.listed()]


@pytest.fixture
def files(tmp_path):
    a = write(
        tmp_path / "a.jsonl", [{"id": f"a{i}", "text": f"apple pie number {i}"} for i in range(6)]
    )
    b = write(
        tmp_path / "b.jsonl", [{"id": f"b{i}", "text": f"blue sky over hill {i}"} for i in range(4)]
    )
    return a, b


def test_unchanged_file_is_skipped_and_a_changed_one_read(tiny_config, files):
    a, b = files
    first = run_index([str(a), str(b)], tiny_config)
    assert (first["read"], first["unchanged_files"]) == (10, 0)
    assert recorded(tiny_config) == ["a.jsonl", "b.jsonl"]

    again = run_index([str(a), str(b)], tiny_config)
    # the summary is a full read's (`read` counts the files' rows), only faster
    assert (again["read"], again["encoded"], again["skipped_unchanged"]) == (10, 0, 10)
    assert again["unchanged_files"] == 2 and again["index"]["version"] is None

    os.utime(a, ns=(1, 1))  # the same bytes with another time: still unchanged (SHA-256)
    rows = [json.loads(line) for line in b.read_text().splitlines()]
    rows[1]["text"] = "green grass by the river"
    write(b, rows)
    third = run_index([str(a), str(b)], tiny_config)
    assert (third["unchanged_files"], third["read"], third["encoded"]) == (1, 10, 1)
    assert third["skipped_unchanged"] == 6 + 3
    assert texts(tiny_config)["b1"] == "green grass by the river"
    # the settings a file is read with are part of what is unchanged
    fourth = run_index(
        [str(a), str(b)], tiny_config.with_overrides(**{"long_documents.max_chars": 5000})
    )
    assert (fourth["unchanged_files"], fourth["read"], fourth["encoded"]) == (0, 10, 0)


def test_a_skipped_file_still_holds_its_ids(tiny_config, files, tmp_path):
    a, b = files
    run_index([str(a)], tiny_config)
    late = write(
        tmp_path / "c.jsonl",
        [{"id": "a2", "text": "not the apple"}, {"id": "c1", "text": "cold tea"}],
    )
    summary = run_index([str(a), str(late)], tiny_config)
    assert summary["unchanged_files"] == 1
    (rejection,) = summary["rejections"]
    assert (
        rejection["id"] == "a2" and "a.jsonl, unchanged since an earlier run" in rejection["reason"]
    )
    assert texts(tiny_config)["a2"] == "apple pie number 2"
    assert "c1" in texts(tiny_config)


def test_a_deletion_forgets_the_records(tiny_config, files):
    a, _ = files
    run_index([str(a)], tiny_config)
    run_delete(tiny_config, "default", ["a3"])
    assert recorded(tiny_config) == []
    summary = run_index([str(a)], tiny_config)  # read again: the deleted document comes back
    assert (summary["unchanged_files"], summary["encoded"]) == (0, 1)
    assert "a3" in texts(tiny_config)


def test_a_run_that_changes_another_files_documents_forgets_its_record(
    tiny_config, files, tmp_path
):
    a, b = files
    run_index([str(a), str(b)], tiny_config)
    other = write(tmp_path / "other.jsonl", [{"id": "a1", "text": "apple crumble instead"}])
    run_index([str(other)], tiny_config)
    assert recorded(tiny_config) == ["other.jsonl"]
    summary = run_index([str(a)], tiny_config)  # a.jsonl read again: its a1 is restored
    assert (summary["unchanged_files"], summary["encoded"]) == (0, 1)
    assert texts(tiny_config)["a1"] == "apple pie number 1"


def test_failed_batches_and_on_missing_delete_read_again(tiny_config, files):
    a, b = files

    def encode(texts, config, encoder, progress):
        if any(t.startswith("blue") for t in texts):
            raise RuntimeError("encoder out of memory")
        return encode_texts_for_index(texts, config, encoder, progress)

    failed = run_index([str(a), str(b)], tiny_config, steps=Steps(encode=encode))
    assert len(failed["failed_batches"]) == 1
    assert recorded(tiny_config) == ["a.jsonl"]  # b.jsonl did not commit whole
    summary = run_index([str(a), str(b)], tiny_config)
    assert (summary["unchanged_files"], summary["read"], summary["encoded"]) == (1, 10, 4)

    deleting = run_index([str(a), str(b)], tiny_config, on_missing="delete")
    assert (deleting["unchanged_files"], deleting["read"], deleting["deleted"]) == (0, 10, 0)


def test_a_skipped_files_rejections_are_reported_again(tiny_config, tmp_path):
    rows = [{"id": "k1", "text": "kept"}, {"id": "k2", "text": "   "}, {"id": "k3", "text": "ok"}]
    messy = write(tmp_path / "messy.jsonl", rows)
    first = run_index([str(messy)], tiny_config)
    again = run_index([str(messy)], tiny_config)
    assert again["unchanged_files"] == 1
    assert (again["read"], again["rejected"]) == (first["read"], first["rejected"]) == (3, 1)
    assert again["rejections"] == first["rejections"]
    with Store(tiny_config.store.path, read_only=True, snapshot=False) as store:
        rows = store.con.execute(
            "SELECT run_id, row_number, reason FROM rejected ORDER BY run_id"
        ).fetchall()
    assert sorted(r[0] for r in rows) == sorted([first["run_id"], again["run_id"]])
    assert rows[0][1:] == rows[1][1:] == (2, "empty text")
    third = run_index([str(messy)], tiny_config)  # carried from the run that carried it
    assert third["rejections"] == first["rejections"]


def test_ids_are_kept_in_a_file_and_a_failed_record_fails_nothing(tiny_config, files, monkeypatch):
    a, b = files
    run_index([str(a), str(b)], tiny_config)
    kept = sorted((tmp := a.parent / "store" / "sources").glob("*.npy"))
    assert len(kept) == 2 and not list(tmp.glob("*.tmp"))
    late = write(a.parent / "c.jsonl", [{"id": "a5", "text": "a late a5"}])
    summary = run_index([str(a), str(late)], tiny_config)  # a.jsonl's ids from its file
    assert summary["unchanged_files"] == 1 and summary["rejections"][0]["id"] == "a5"
    for damaged in kept:
        damaged.write_bytes(b"not an array")
    summary = run_index([str(a), str(b)], tiny_config)  # damaged fingerprints: read again
    assert (summary["unchanged_files"], summary["encoded"]) == (0, 0)

    def out_of_memory(*args, **kwargs):
        raise duckdb.OutOfMemoryException("could not allocate block")

    monkeypatch.setattr("indexer.store.sources.SourceFiles._record", out_of_memory)
    rows = [json.loads(line) for line in b.read_text().splitlines()]
    write(b, rows + [{"id": "b9", "text": "one more"}])
    done = run_index([str(a), str(b)], tiny_config)  # indexed and published all the same
    assert done["encoded"] == 1 and "could not allocate" in done["files_not_recorded"]
    assert "b9" in texts(tiny_config)
