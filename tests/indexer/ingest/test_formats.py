"""Input formats come from one registry: every suffix it lists is read inside a directory
(`.tsv`, `.json`, `.csv.gz` included), a file with an unknown suffix there is reported as a
rejection (never skipped without a word), and the CLI's `--format` choices and the `format`
config key are the registry's names.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import click
import pytest

from indexer.config.flows import SourceConfig
from indexer.errors import ConfigError, InputError
from indexer.indexing.run import run_index
from indexer.ingest.formats import FORMATS, corpus_suffixes, detect_format, format_names
from search.cli.main import index


def write_mixed_folder(folder: Path) -> Path:
    """One document per registered kind of file, plus files that are not corpus files."""
    folder.mkdir()
    (folder / "a.jsonl").write_text(json.dumps({"id": "jl", "text": "the cat sat"}) + "\n")
    (folder / "b.json").write_text(json.dumps({"id": "js", "text": "the dog slept"}) + "\n")
    (folder / "c.tsv").write_text("id\ttext\nts\tred apple green pear\n")
    with gzip.open(folder / "d.csv.gz", "wt") as fh:
        fh.write("id,text\ncg,blue river big mountain\n")
    with gzip.open(folder / "e.ndjson.gz", "wt") as fh:
        fh.write(json.dumps({"id": "ng", "text": "small city fast train"}) + "\n")
    (folder / "notes.md").write_text("# not a corpus file\n")
    (folder / ".hidden.jsonl").write_text(json.dumps({"id": "h", "text": "hidden"}) + "\n")
    (folder / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    (folder / "sub").mkdir()
    (folder / "sub" / "deeper.jsonl").write_text(json.dumps({"id": "s", "text": "sub"}) + "\n")
    return folder


def test_every_registered_kind_in_a_directory_is_read_and_others_are_reported(
    tiny_config, tmp_path
):
    folder = write_mixed_folder(tmp_path / "corpus")
    summary = run_index([str(folder)], tiny_config)
    names = sorted(Path(p).name for p in summary["files"])
    assert names == [".hidden.jsonl", "a.jsonl", "b.json", "c.tsv", "d.csv.gz", "e.ndjson.gz"]
    assert summary["encoded"] == 6
    reported = {Path(r["source"]).name: r for r in summary["rejections"]}
    assert set(reported) == {"notes.md"}  # not subfolders, not hidden files such as .DS_Store
    assert reported["notes.md"]["row"] == 0
    assert "cannot tell the format from the name" in reported["notes.md"]["reason"]
    assert ".tsv" in reported["notes.md"]["reason"] and "--format" in reported["notes.md"]["reason"]
    assert summary["rejected"] == 1


def test_a_directory_without_corpus_files_is_an_error_naming_what_it_holds(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    (folder / "readme.txt").write_text("hello")
    from indexer.ingest.paths import expand_paths

    with pytest.raises(InputError, match=r"holds no corpus files \(found readme.txt\)"):
        expand_paths([folder])


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("x.jsonl", "jsonl"),
        ("x.ndjson", "jsonl"),
        ("x.json", "jsonl"),
        ("X.JSONL.GZ", "jsonl"),
        ("x.csv", "csv"),
        ("x.csv.gz", "csv"),
        ("x.tsv", "tsv"),
        ("x.tsv.gz", "tsv"),
        ("x.parquet", "parquet"),
        ("x.txt", "text"),
        ("x.txt.gz", "text"),
    ],
)
def test_detect_format_by_name(name, expected):
    assert detect_format(Path(name)) == expected


def test_unknown_suffix_names_the_known_ones_and_the_choices():
    with pytest.raises(InputError) as err:
        detect_format(Path("x.parquet.gz"))
    message = str(err.value)
    assert "x.parquet.gz" in message and ".csv.gz" in message and "tsv" in message


def test_suffixes_are_listed_once_per_format():
    suffixes = corpus_suffixes()
    assert len(suffixes) == len(set(suffixes))
    assert {".jsonl", ".jsonl.gz", ".json", ".csv.gz", ".tsv", ".parquet"} <= set(suffixes)
    assert ".parquet.gz" not in suffixes  # Parquet compresses inside the file


def test_cli_and_config_take_the_registry_names():
    option = next(p for p in index.params if p.name == "fmt")
    assert isinstance(option.type, click.Choice)
    assert tuple(option.type.choices) == format_names() == ("auto", *FORMATS)
    for name in format_names():
        assert SourceConfig(paths=["x"], format=name).format == name
    with pytest.raises(ValueError, match="choose one of auto, jsonl"):
        SourceConfig(paths=["x"], format="xml")


def test_config_file_with_an_unknown_format_names_the_key(tmp_path):
    from indexer.config import load_config

    path = tmp_path / "config.yaml"
    path.write_text("sources:\n  docs:\n    paths: [x]\n    format: xml\n")
    with pytest.raises(ConfigError, match=r"sources\.docs\.format.*unknown format 'xml'"):
        load_config(path)


def test_a_text_file_named_is_one_document_per_line_and_a_folder_leaves_it_out(
    tiny_config, tmp_path
):
    """`.txt` (TweetEval's `*_text.txt`): each non-blank line a document `<name>:<line>`, a
    line that is not UTF-8 rejected by number; a folder given whole reports its .txt files
    as not read (a README.txt is not a corpus)."""
    tweets = tmp_path / "tweets.txt"
    tweets.write_bytes(b"the cat sat\n\nthe dog slept\n\xff\xfe broken\nred apple\n")
    summary = run_index([str(tweets)], tiny_config)
    assert summary["encoded"] == 3
    assert [(r["row"], "UTF-8" in r["reason"]) for r in summary["rejections"]] == [(4, True)]
    from indexer.store import Store

    with Store(tiny_config.store.path, read_only=True) as store:
        doc_ids = [int(i) for ids, _ in store.dedup.iter_texts("default") for i in ids]
        hits = store.reads.fetch_documents(doc_ids)
    assert sorted((h.external_id, h.text) for h in hits.values()) == [
        ("tweets.txt:1", "the cat sat"),
        ("tweets.txt:3", "the dog slept"),
        ("tweets.txt:5", "red apple"),
    ]
    folder = write_mixed_folder(tmp_path / "corpus")
    (folder / "README.txt").write_text("how this folder was made\n")
    other = tiny_config.with_overrides(**{"store.path": str(tmp_path / "store2")})
    reported = {
        Path(r["source"]).name: r["reason"] for r in run_index([str(folder)], other)["rejections"]
    }
    assert "read only when named" in reported["README.txt"]
