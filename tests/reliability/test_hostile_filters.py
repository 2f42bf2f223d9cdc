"""Hostile filter values and field names are data, never SQL or JSON-path syntax: through the
library (every search mode), the CLI (`--where`, `--label`, `--entity`, `--collection`) and
`bertindex serve` (`where` in POST /search). Each returns "no hits" (exit 0, no output) and the
store is the same afterwards; the same filters with honest values do find documents, so the
empty answers mean "nothing matched", not "the filter broke".
"""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from testkit import tiny_model_config

from indexer.config import Config
from indexer.indexing.run import run_index
from indexer.indexing.steps import sync_vector_index
from indexer.ops.consistency import check_store
from indexer.query.searcher import Searcher
from indexer.records.annotations import Annotation, Entity, Label
from indexer.store import Store
from search.cli.main import main

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.heavy]

DOCS = [
    {
        "id": "d1",
        "text": "the cat sat on the mat",
        "lang": "en",
        "a'b": "quote",
        'a"b': "double",
        "*": "star",
        "x.y": "dotted",
        "x": {"y": "nested"},
        "a/b": "slash",
        "~": "tilde",
        "": "empty key",
        "שפה": "עברית",
    },
    {"id": "d2", "text": "the dog slept on the sofa", "lang": "fr", "x": {"y": "other"}},
    {"id": "d3", "text": "parse command line arguments in python", "lang": "en"},
]

INJECTIONS = [
    "x'; DROP TABLE documents; --",
    "en' OR '1'='1",
    'en" OR "1"="1',
    "1); DELETE FROM chunks; --",
    "'; UPDATE documents SET text = 'pwned'; --",
    "%",
    "_",
    "*",
    "$",
    "$.lang",
    "/lang",
    "$..*",
    "../../etc/passwd",
    "\\",
    "\x00",
    "en\x00",
    "NULL",
    "عربي'; --",
    "🔥' OR 1=1 --",
    "a" * 100_000,
]
# field names that are JSON-path or SQL tricks; none is a key of any document
HOSTILE_KEYS = [
    "lang' OR '1'='1",
    'lang"',
    "$.lang",
    "$..lang",
    "lang.*",
    "lang[0]",
    "lang/0",
    "/lang",
    "x.y.z",
    "x/y",
    "~0",
    "~1",
    "$",
    "**",
    "lang') OR 1=1 --",
    "a" * 10_000,
    "\x00",
]


@pytest.fixture(scope="module")
def store_config(tiny_model_dir, tmp_path_factory):
    """A store with three documents, one label and one entity, published for searches."""
    root = tmp_path_factory.mktemp("hostile")
    corpus = root / "docs.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in DOCS))
    config = tiny_model_config(tiny_model_dir, root / "store")
    run_index([str(corpus)], config, collection="docs")
    with Store(config.store.path) as store:
        base = store.data_version()
        d1 = store.con.execute(
            "SELECT doc_id, text, content_hash FROM documents WHERE external_id = 'd1'"
        ).fetchone()
        store.annotations.write(
            [d1],
            [
                Annotation(
                    labels=[Label("pos", 0.9, head="clf")],
                    entities=[Entity("LOC", 8, 11, "mat", 0.8, head="ner")],
                )
            ],
            {"clf": "v1", "ner": "v1"},
        )
        sync_vector_index(store, config, [], [], base)
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config.model_dump()))
    return config, path


def fingerprint(config: Config) -> dict:
    """Row counts of every table, the FAISS size and a digest of the documents."""
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        tables = [
            r[0]
            for r in store.con.execute(
                "SELECT table_name FROM information_schema.tables ORDER BY 1"
            ).fetchall()
        ]
        counts = {t: store.con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        digest = store.con.execute(
            "SELECT string_agg(external_id || text || metadata, '|' ORDER BY doc_id) FROM documents"
        ).fetchone()[0]
    contents = check_store(config)
    return {
        "counts": counts,
        "digest": digest,
        "vectors": len(contents.vectors),
        "problems": contents.problems,
    }


QUERY = "the cat sat on the mat"


def search_ids(searcher, mode, **filters) -> list[str]:
    """Ids found for QUERY (its vector encoded once per searcher) under the filters."""
    if not hasattr(searcher, "query_vector"):
        searcher.query_vector = searcher.encode_queries([QUERY])
    hits = searcher.search_many([QUERY], 10, mode=mode, vectors=searcher.query_vector, **filters)[0]
    return [h.id for h in hits]


@pytest.mark.parametrize("mode", ["dense", "keyword", "hybrid"])
def test_library_filters_take_hostile_values_as_data(store_config, mode):
    """Every value and key in hybrid mode (both the chunk-id and the doc-id filter queries
    run); a sample in the dense and keyword modes."""
    config, _ = store_config
    before = fingerprint(config)
    assert before["problems"] == [] and before["counts"]["documents"] == 3
    with Store(config.store.path, read_only=True) as store:
        searcher = Searcher(config, store)
        # honest filters find what they should: keys are literal names, never paths
        english = search_ids(searcher, mode, where=[("lang", "en")])
        assert "d1" in english and set(english) <= {"d1", "d3"}
        assert search_ids(searcher, mode, where=[("lang", "fr")]) == ["d2"]
        for key, value in [
            ("a'b", "quote"),
            ('a"b', "double"),
            ("*", "star"),
            ("x.y", "dotted"),
            ("a/b", "slash"),
            ("~", "tilde"),
            ("", "empty key"),
            ("שפה", "עברית"),
            ("x", '{"y":"nested"}'),
        ]:
            assert search_ids(searcher, mode, where=[(key, value)]) == ["d1"], key
        assert search_ids(searcher, mode, labels=[("clf", "pos")]) == ["d1"]
        assert search_ids(searcher, mode, entities=[("LOC", "MAT")]) == ["d1"]
        assert search_ids(searcher, mode, entities=[("LOC", None)]) == ["d1"]
        assert search_ids(searcher, mode, collection="docs")

        for value in INJECTIONS if mode == "hybrid" else INJECTIONS[:3] + INJECTIONS[-3:]:
            for filters in (
                {"where": [("lang", value)]},
                {"where": [(value, "en")]},
                {"labels": [("clf", value)]},
                {"labels": [(value, "pos")]},
                {"entities": [("LOC", value)]},
                {"entities": [(value, None)]},
                {"collection": value},
            ):
                assert search_ids(searcher, mode, **filters) == [], (filters, value[:40])
        for key in HOSTILE_KEYS:
            assert search_ids(searcher, mode, where=[(key, "en")]) == [], key
            assert search_ids(searcher, mode, where=[(key, "nested")]) == [], key
        # hostile query text: searched as words (or a vector), never as syntax
        for value in INJECTIONS[:6]:
            searcher.search(value, 5, mode=mode)
    assert fingerprint(config) == before


def test_cli_filters_with_injection_strings_are_no_hits(store_config):
    config, path = store_config
    before = fingerprint(config)
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(
            main, ["search", "the cat sat on the mat", "--config", str(path), "--json", *args]
        )
        assert result.exit_code == 0, (args, result.output)
        return [json.loads(line)["id"] for line in result.stdout.splitlines()]

    assert run("--where", "*=star", "--label", "clf=pos", "--entity", "LOC=mat") == ["d1"]
    sql, path_trick = "x'; DROP TABLE documents; --", "$..*"
    assert run("--where", f"lang={sql}") == []
    assert run("--where", f"{path_trick}=en", "--where", "lang' OR '1'='1=en") == []
    assert run("--label", f"clf={sql}") == []
    assert run("--label", f"{sql}=pos") == []
    assert run("--entity", f"LOC={sql}") == []
    assert run("--entity", "LOC') OR 1=1 --") == []
    assert run("--collection", sql + "a" * 20_000) == []
    table = runner.invoke(
        main,
        ["search", "cat", "--config", str(path), "--where", "lang=x'; DROP TABLE documents; --"],
    )
    assert table.exit_code == 0 and table.stdout == "" and "no hits" in table.stderr
    assert fingerprint(config) == before


def test_server_where_takes_hostile_keys_and_values_as_data(store_config):
    from fastapi.testclient import TestClient

    from search.server import MAX_NAME_CHARS, create_app

    config, _ = store_config
    before = fingerprint(config)
    with Store(config.store.path, read_only=True) as store:
        client = TestClient(create_app(Searcher(config, store)))

        def post(where, mode="hybrid"):
            answer = client.post(
                "/search",
                json={"query": "the cat sat on the mat", "k": 5, "mode": mode, "where": where},
            )
            assert answer.status_code == 200, (where, answer.text)
            return [h["id"] for h in answer.json()["hits"]]

        assert post({"*": "star", "a'b": "quote"}) == ["d1"]
        for value in INJECTIONS[:-1]:
            assert post({"lang": value}) == []
            assert post({value: "en"}) == []
        for key in HOSTILE_KEYS:
            if len(key) > MAX_NAME_CHARS:  # the server caps every field that scales work (422)
                answer = client.post("/search", json={"query": "cat", "where": {key: "en"}})
                assert answer.status_code == 422 and "at most 200" in answer.text
                continue
            assert post({key: "en"}, mode="dense") == []
        too_big = client.post("/search", json={"query": "cat", "where": {"lang": "a" * 20_000}})
        assert too_big.status_code == 413
    assert fingerprint(config) == before
