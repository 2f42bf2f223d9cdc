"""A bad-input corpus written by the tests into a temporary folder (never committed): good
records mixed with every kind of bad one the reliability suite covers, in JSONL, CSV and
Parquet, with the expected outcome of each row.

`write_bad_corpus(folder)` returns a `BadCorpus`: the files in reading order, the good records
(id -> text as indexed, title included) and the expected rejections ((file name, row) ->
a fragment of the reason).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path

FIVE_MB = 5 * 1024 * 1024


@dataclass
class BadCorpus:
    files: list[Path]
    good: dict[str, str] = field(default_factory=dict)  # id -> title + " " + text (as encoded)
    rejected: dict[tuple[str, int], str] = field(default_factory=dict)  # (file, row) -> reason part
    metadata: dict[str, dict] = field(default_factory=dict)  # id -> expected stored metadata


def _line(obj) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8") + b"\n"


def write_bad_corpus(folder: Path) -> BadCorpus:
    folder.mkdir(parents=True, exist_ok=True)
    corpus = BadCorpus(files=[])
    _jsonl(folder / "a.jsonl", corpus)
    _csv(folder / "b.csv", corpus)
    _csv_without_text_column(folder / "c_nocolumn.csv", corpus)
    _parquet(folder / "d.parquet", corpus)
    _parquet_wrong_types(folder / "e_types.parquet", corpus)
    return corpus


def _jsonl(path: Path, corpus: BadCorpus) -> None:
    name = path.name
    rows: list[tuple[bytes, str | None, str | None]] = [
        # (line bytes, good id or None, reason fragment or None)
        (
            (
                b'{"id": "g01", "text": "the cat sat on the mat", "lang": "en", "score": NaN, '
                b'"nested": {"a": [1, {"b": NaN}], "c": Infinity, "d": {"e": "deep"}}}\n'
            ),
            "g01",
            None,
        ),
        (_line({"id": "e1", "text": ""}), None, "empty text"),
        (_line({"id": "e2", "text": "   \t\n  "}), None, "empty text"),
        (_line({"id": "n1", "text": None}), None, "text is null"),
        (_line({"id": None, "text": "a text without an id"}), None, "empty id field 'id'"),
        (_line({"id": "w1", "text": 42}), None, "text must be a string, got int"),
        (_line({"id": "w2", "text": ["a", "list"]}), None, "text must be a string, got list"),
        (
            _line({"id": {"x": 1}, "text": "an object as id"}),
            None,
            "id field 'id' must be a string or number, got dict",
        ),
        (
            _line(
                {
                    "id": "g02",
                    "title": "dogs",
                    "text": "the dog slept on the sofa",
                    "tags": ["pet", "home"],
                }
            ),
            "g02",
            None,
        ),
        (
            _line({"id": "g01", "text": "a second record with id g01"}),
            None,
            "duplicate id 'g01' (first at row 1)",
        ),
        (b'{"id": "u1", "text": "caf\xff invalid utf-8"}\n', None, "invalid UTF-8"),
        (_line({"id": "z1", "text": "a NUL \u0000 byte"}), None, "NUL byte (U+0000)"),
        (b'{"id": "z2", "text": "a raw NUL \x00 byte"}\n', None, "broken JSON"),
        (
            _line({"id": "big", "text": "word " * (FIVE_MB // 5)}),
            None,
            "over long_documents.max_chars (1,000,000)",
        ),
        (b'{"id": "bj", "text": "broken json\n', None, "broken JSON"),
        (_line({"id": "g03", "text": "مرحبا بالعالم هذا نص عربي قصير", "lang": "ar"}), "g03", None),
        (_line({"id": "g04", "text": "שלום עולם זה טקסט בעברית", "lang": "he"}), "g04", None),
        (_line({"id": "g05", "text": "🚀 launch party tonight 🎉🔥", "lang": "en"}), "g05", None),
        (b'{"id": "s1", "text": "a lone \\ud800 surrogate"}\n', None, "unpaired surrogate"),
        (_line({"id": 7, "text": "parse command line arguments in python"}), "7", None),
        (
            _line({"id": "7", "text": "a string id equal to the number 7"}),
            None,
            "duplicate id '7' (first at row 20)",
        ),
        (b"[1, 2, 3]\n", None, "a line must hold a JSON object"),
        (
            _line({"id": "t1", "title": {"x": 1}, "text": "an object as title"}),
            None,
            "title must be a string, a number or null, got dict",
        ),
        (b"   \n", None, None),  # a blank line: skipped, not a record
        (_line({"id": "g07", "title": "red apple green pear", "text": ""}), "g07", None),
        (_line({"text": "a record without the id field"}), None, "missing id field 'id'"),
        (
            b'{"id": "m1", "text": "metadata surrogate", "note": "x\\udfffy"}\n',
            None,
            "metadata holds an unpaired surrogate",
        ),
    ]
    path.write_bytes(b"".join(line for line, _, _ in rows))
    texts = {
        "g01": "the cat sat on the mat",
        "g02": "dogs the dog slept on the sofa",
        "g03": "مرحبا بالعالم هذا نص عربي قصير",
        "g04": "שלום עולם זה טקסט בעברית",
        "g05": "🚀 launch party tonight 🎉🔥",
        "7": "parse command line arguments in python",
        "g07": "red apple green pear",
    }
    for number, (_, good, reason) in enumerate(rows, start=1):
        if good:
            corpus.good[good] = texts[good]
        elif reason:
            corpus.rejected[(name, number)] = reason
    corpus.metadata["g01"] = {
        "lang": "en",
        "score": None,
        "nested": {"a": [1, {"b": None}], "c": None, "d": {"e": "deep"}},
    }
    corpus.metadata["g02"] = {"tags": ["pet", "home"]}
    corpus.files.append(path)


def _csv(path: Path, corpus: BadCorpus) -> None:
    lines = [
        (b"id,text,lang\n", None, None),
        (b'c01,"compress a file with gzip, then write data",en\n', "c01", None),
        (b"c02,a short row\n", None, "row has 2 fields, the header has 3"),
        (
            b'g02,"the same id as a.jsonl row 9",en\n',
            None,
            "duplicate id 'g02' (first at {a} row 9)",
        ),
        (b"c03,bad \xff\xfe bytes,en\n", None, "invalid UTF-8 in column 'text'"),
        (b"c04,,en\n", None, "text is null"),
        (b'c05,"blue river, big mountain",he\n', "c05", None),
        (b"c06,too,many,fields\n", None, "row has 4 fields, the header has 3"),
        (b'c07,"a raw NUL \x00 byte",en\n', None, "NUL byte (U+0000)"),
        ('c08,"עברית ועוד 🌍 emoji mix banana",he\n'.encode(), "c08", None),
        (b'c09,"   ",en\n', None, "empty text"),
        (b'c10,"an ""unterminated quote,en\n', None, "CSV parse error"),
    ]
    path.write_bytes(b"".join(line for line, _, _ in lines))
    texts = {
        "c01": "compress a file with gzip, then write data",
        "c05": "blue river, big mountain",
        "c08": "עברית ועוד 🌍 emoji mix banana",
    }
    a = str(path.parent / "a.jsonl")
    for number, (_, good, reason) in enumerate(lines[1:], start=1):
        if good:
            corpus.good[good] = texts[good]
        elif reason:
            corpus.rejected[(path.name, number)] = reason.replace("{a}", a)
    corpus.metadata["c04"] = {}
    corpus.files.append(path)


def _csv_without_text_column(path: Path, corpus: BadCorpus) -> None:
    path.write_text("id,body\nx1,hello there\nx2,general kenobi\n")
    for number in (1, 2):
        corpus.rejected[(path.name, number)] = "missing text field 'text'"
    corpus.files.append(path)


def _parquet(path: Path, corpus: BadCorpus) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    nan = float("nan")
    when = dt.datetime(2024, 1, 2, 3, 4, 5)
    table = pa.table(
        {
            "id": pa.array(["p01", "p02", "p03", "g01", "p04", None, "p05"]),
            "text": pa.array(
                [
                    "small city fast train",
                    None,
                    "   ",
                    "the same id as a.jsonl row 1",
                    "slow car house on a rug",
                    "a text without an id",
                    "query vector index search",
                ]
            ),
            "year": pa.array([2020.0, 2021.0, nan, 2022.0, nan, 2023.0, 2024.0]),
            "when": pa.array([when] * 7, pa.timestamp("us")),
            "meta": pa.array(
                [{"k": "a", "v": nan}] * 7, pa.struct([("k", pa.string()), ("v", pa.float64())])
            ),
        }
    )
    pq.write_table(table, path)
    a = str(path.parent / "a.jsonl")
    reasons = {
        2: "text is null",
        3: "empty text",
        4: f"duplicate id 'g01' (first at {a} row 1)",
        6: "empty id field 'id'",
    }
    for number, reason in reasons.items():
        corpus.rejected[(path.name, number)] = reason
    corpus.good.update(
        {
            "p01": "small city fast train",
            "p04": "slow car house on a rug",
            "p05": "query vector index search",
        }
    )
    corpus.metadata["p04"] = {"year": None, "when": when.isoformat(), "meta": {"k": "a", "v": None}}
    corpus.files.append(path)


def _parquet_wrong_types(path: Path, corpus: BadCorpus) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array([101, 102], pa.int64()), "text": pa.array([5, 6], pa.int64())})
    pq.write_table(table, path)
    for number in (1, 2):
        corpus.rejected[(path.name, number)] = "text must be a string, got int"
    corpus.files.append(path)
