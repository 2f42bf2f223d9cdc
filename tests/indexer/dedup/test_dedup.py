"""Near-duplicate groups from stored vectors: hand-made near-copies grouped (and a vector twin
whose words differ kept apart), the text normaliser, an incremental run that searches only the
new documents and merges the groups they bridge, bad parameters that change nothing, and
`search --unique` collapsing a group. Vectors are numpy arrays; no model but the tiny one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from dedup_kit import DIM, add_docs, basis, near, unit

from indexer.config import Config
from indexer.dedup.groups import run_dedup
from indexer.dedup.text import jaccard, normalise, word_set
from indexer.errors import InputError, StoreError
from indexer.store import Store
from search.cli.main import main


@pytest.fixture
def config(tmp_path) -> Config:
    return Config().with_overrides(
        **{
            "store.path": str(tmp_path / "store"),
            "index.spec": "Flat",
            "dedup.threshold": 0.9,
            "dedup.min_jaccard": 0.5,
            "dedup.min_size": 2,
        }
    )


def test_normalise_strips_what_copies_change():
    assert normalise("RT @user: Big NEWS!!! https://t.co/x #breaking 🔥") == "big news"
    assert normalise("big   news.") == "big news"
    assert jaccard(
        word_set("the cat sat on the mat"), word_set("RT @a: The cat sat on a mat!")
    ) == pytest.approx(5 / 6)  # {the, cat, sat, on, mat} vs {the, cat, sat, on, a, mat}
    assert jaccard(word_set("🔥🔥"), word_set("#tag http://x")) == 1.0


def wave_docs(e):
    return [
        ("a0", "Big news about the river flood today", unit(e[0]), {"t": "2024-01-01"}),
        (
            "a1",
            "RT @user: big news about the river flood today! https://t.co/zz",
            near(e[0], 1),
            {"t": "2024-01-02"},
        ),
        (
            "a2",
            "Big news about the river flood today #flood 🔥",
            near(e[0], 2),
            {"t": "2024-01-09"},
        ),
        ("b0", "the cat sat on the mat", unit(e[1]), {}),
        ("b1", "apple banana pear city train", near(e[1], 3), {}),  # vector twin, other words
        ("c0", "a quiet house by the sea", unit(e[2]), {}),
    ]


def test_hand_made_near_copies_are_grouped(config):
    e = basis()
    ids = add_docs(config, wave_docs(e))
    summary = run_dedup(config, "c")
    assert summary["mode"] == "full" and summary["searched"] == 6
    assert summary["index"]["rebuilt"] is False  # the index is saved again, not rebuilt
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        groups = store.dedup.groups_of(ids)
        listed = store.dedup.groups("c", min_size=2, time_field="t")
    a0, a1, a2, b0, b1, c0 = ids
    assert groups == {a0: a0, a1: a0, a2: a0, b0: b0, b1: b1, c0: c0}
    assert len(listed) == 1
    wave = listed[0]
    assert wave["size"] == 3 and wave["members"] == ["a0", "a1", "a2"]
    assert wave["representative"].startswith("Big news")
    assert str(wave["first_seen"]).startswith("2024-01-01")
    assert str(wave["last_seen"]).startswith("2024-01-09")
    # without the text check the vector twins b0/b1 join too
    summary = run_dedup(config, "c", min_jaccard=0.0)
    assert summary["mode"] == "full" and "changed" in summary["reason"]
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        assert store.dedup.groups_of([b1]) == {b1: b0}


def test_a_rerun_searches_only_new_documents_and_merges_bridged_groups(config):
    e = basis()
    rng = np.random.default_rng(7)
    filler = [
        (f"f{i}", f"filler text number {i}", unit(rng.standard_normal(DIM).astype(np.float32)), {})
        for i in range(60)
    ]
    # d0 and e0 are 0.85 apart (below 0.9): two groups until a document between them arrives
    d0, e0 = e[3], unit(0.85 * e[3] + np.sqrt(1 - 0.85**2) * e[4])
    docs = (
        wave_docs(e)
        + [
            ("d0", "storm warning for the coast", d0, {}),
            ("e0", "storm warning for the coast now", e0, {}),
        ]
        + filler
    )
    first_ids = add_docs(config, docs)
    first = run_dedup(config, "c", threshold=0.9)
    assert first["mode"] == "full" and first["searched"] == len(docs)
    ids = {name: d for (name, *_), d in zip(docs, first_ids)}
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        assert store.dedup.groups_of([ids["d0"], ids["e0"]]) == {
            ids["d0"]: ids["d0"],
            ids["e0"]: ids["e0"],
        }
    new = [
        ("a3", "big news about the river flood today!!", near(e[0], 9), {}),
        ("x0", "storm warning for the coast", unit(d0 + e0), {}),
        ("z0", "nothing like the others", unit(e[5]), {}),
    ]
    new_ids = add_docs(config, new)
    second = run_dedup(config, "c", threshold=0.9)
    assert second["mode"] == "incremental"
    assert second["searched"] == len(new)  # the work: the 3 new vectors, not the 71 stored
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        groups = store.dedup.groups_of([*first_ids, *new_ids])
    a3, x0, z0 = new_ids
    assert groups[a3] == ids["a0"]
    assert groups[x0] == groups[ids["d0"]] == groups[ids["e0"]] == ids["d0"]  # merged
    assert groups[z0] == z0
    # a third run with nothing new searches nothing
    assert run_dedup(config, "c", threshold=0.9)["searched"] == 0


def state_of(config: Config) -> tuple:
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        return store.data_version(), store.dedup.state("c"), store.runs.last(20)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"threshold": 0.0}, InputError, r"--threshold 0.0 is outside \(0, 1\]"),
        ({"threshold": 1.5}, InputError, r"outside \(0, 1\]"),
        ({"min_size": 1}, InputError, "at least 2"),
        ({"collection": "empty"}, StoreError, "collection 'empty' has no stored vectors"),
    ],
)
def test_bad_parameters_change_nothing(config, kwargs, error, match):
    add_docs(config, wave_docs(basis()))
    before = state_of(config)
    collection = kwargs.pop("collection", "c")
    with pytest.raises(error, match=match):
        run_dedup(config, collection, **kwargs)
    assert state_of(config) == before


def test_a_store_being_rebuilt_is_refused(config, tmp_path):
    add_docs(config, wave_docs(basis()))
    (tmp_path / "store" / "generations" / "next").mkdir(parents=True)
    before = state_of(config)
    result = CliRunner().invoke(
        main, ["dedup", "--collection", "c", "--store", str(tmp_path / "store")]
    )
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "being rebuilt" in lines[0] and "nothing was changed" in lines[0]
    assert state_of(config) == before


def test_cli_dedup_json_and_status(config, tmp_path):
    add_docs(config, wave_docs(basis()))
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        f"store: {{path: {config.store.path}}}\nindex: {{spec: Flat}}\n"
        "dedup: {threshold: 0.9, min_size: 2}\n"
    )
    runner = CliRunner()
    result = runner.invoke(main, ["dedup", "--collection", "c", "--config", str(cfg), "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.output.strip().splitlines()]
    assert lines[0]["summary"]["groups"] == 1 and lines[1]["size"] == 3
    bad = runner.invoke(
        main, ["dedup", "--collection", "c", "--config", str(cfg), "--threshold", "2"]
    )
    assert bad.exit_code == 1 and bad.output.count("\n") == 1
    status = runner.invoke(main, ["status", "--config", str(cfg), "--json"])
    info = json.loads(status.output)
    assert info["last"]["dedup"]["status"] == "completed"
    assert info["last"]["report"] is None


def test_search_unique_collapses_a_wave(tiny_config, tmp_path):
    from indexer.indexing.run import run_index

    rows = [{"id": f"w{i}", "text": "the cat sat on the mat"} for i in range(4)]
    rows += [
        {"id": "o1", "text": "parse command line arguments in python"},
        {"id": "o2", "text": "compress a file with gzip"},
    ]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = tiny_config.with_overrides(**{"dedup.min_size": 2})
    run_index([str(corpus)], cfg, collection="c")
    summary = run_dedup(cfg, "c", threshold=0.99)
    assert summary["groups"] == 1 and summary["grouped_documents"] == 4
    from indexer.query.searcher import Searcher

    with Store(cfg.store.path, read_only=True) as store:
        searcher = Searcher(cfg, store)
        plain = searcher.search("the cat sat on the mat", k=6, mode="dense")
        hits, sizes = searcher.search_unique("the cat sat on the mat", k=3, mode="dense")
    assert sum(h.id.startswith("w") for h in plain) == 4
    assert [h.id.startswith("w") for h in hits].count(True) == 1
    assert len(hits) == 3 and sizes[("c", hits[0].id)] == 4
    assert {h.id for h in hits[1:]} == {"o1", "o2"}


def test_the_ivf_path_finds_the_same_groups(config, monkeypatch):
    """Above FLAT_LIMIT the candidates come from 8-bit IVF codes and are rescored from the
    stored float32 vectors: the groups must be the same as the exact path's."""
    from indexer.dedup import neighbours

    e = basis()
    rng = np.random.default_rng(3)
    filler = [
        (f"f{i}", f"filler {i}", unit(rng.standard_normal(DIM).astype(np.float32)), {})
        for i in range(200)
    ]
    ids = add_docs(config, wave_docs(e) + filler)
    exact = run_dedup(config, "c")
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        want = store.dedup.groups_of(ids)
    monkeypatch.setattr(neighbours, "FLAT_LIMIT", 10)
    approx = run_dedup(config, "c", rebuild=True)
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        got = store.dedup.groups_of(ids)
    assert got == want and approx["pairs"] == exact["pairs"] == 3


def test_cli_search_unique_shows_group_sizes(tiny_config, tmp_path):
    import yaml

    from indexer.indexing.run import run_index

    rows = [{"id": f"w{i}", "text": "the cat sat on the mat"} for i in range(3)]
    rows += [{"id": "o1", "text": "parse command line arguments in python"}]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_index([str(corpus)], tiny_config, collection="c")
    run_dedup(tiny_config, "c", threshold=0.99)
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump(tiny_config.model_dump()))
    result = CliRunner().invoke(
        main,
        [
            "search",
            "the cat sat on the mat",
            "--unique",
            "-k",
            "2",
            "--mode",
            "dense",
            "--json",
            "--config",
            str(cfg),
        ],
    )
    assert result.exit_code == 0, result.output
    hits = [json.loads(x) for x in result.output.strip().splitlines()]
    assert [h["group_size"] for h in hits] == [3, 1] and hits[1]["id"] == "o1"
    table = CliRunner().invoke(
        main,
        [
            "search",
            "the cat sat on the mat",
            "--unique",
            "-k",
            "2",
            "--mode",
            "dense",
            "--config",
            str(cfg),
        ],
    )
    assert "[x3]" in table.output


def test_short_comments_sharing_two_words_are_not_copies():
    from indexer.dedup.text import same_words

    assert not same_words(word_set("@user she is"), word_set("@user Yeah she is"), 0.5)
    assert same_words(word_set("@user @user"), word_set("RT @user: 🔥 #tag"), 0.5)  # both empty
    assert same_words(
        word_set("big news about the flood"),
        word_set("RT @user: BIG news about the flood!! https://t.co/x"),
        0.9,
    )
    assert not same_words(
        word_set("big news about the flood"), word_set("big news about the fire today"), 0.6
    )  # 4/7


def test_word_sets_decide_every_pair_as_same_words():
    """The batch check the full grouping streams through (integer word ids, many pairs at once)
    must decide each pair exactly as `same_words` on the two texts' word sets, unknown and
    word-less documents included."""
    from indexer.dedup.text import WordSets, same_words

    rng = np.random.default_rng(5)
    vocab = [
        "big",
        "news",
        "flood",
        "fire",
        "she",
        "is",
        "the",
        "cat",
        "sat",
        "mat",
        "@user",
        "#tag",
        "https://t.co/x",
        "RT @a:",
        "🔥",
        "Flood!!",
    ]
    texts = {d: " ".join(rng.choice(vocab, rng.integers(0, 9))) for d in range(10, 90)}
    texts[91] = ""  # no words at all
    words = WordSets(
        [
            (np.array(list(texts)[:40]), list(texts.values())[:40]),
            (np.array(list(texts)[40:]), list(texts.values())[40:]),
        ]
    )
    a = rng.integers(5, 95, 3000)  # 5-9 and 92-94 have no stored text
    b = rng.integers(5, 95, 3000)
    for min_jaccard in (0.3, 0.6, 0.9):
        got = words.same(a, b, min_jaccard)
        want = [
            same_words(word_set(texts.get(x, "")), word_set(texts.get(y, "")), min_jaccard)
            for x, y in zip(a.tolist(), b.tolist())
        ]
        assert got.tolist() == want
    assert 0 < sum(want) < len(want)
