"""`keyword.language`: the BM25 analyzer per language (an inflected or unaccented query word finds
its document), recorded in the index, rebuilt when the setting changes, reported by doctor."""

from __future__ import annotations

import json

import pytest

from indexer.errors import ConfigError
from indexer.index.keyword import (
    LANGUAGE_FILE,
    LANGUAGES,
    KeywordIndex,
    analyze,
    recorded_language,
    sync_keyword_index,
)
from indexer.indexing.run import run_index
from indexer.ops.doctor import diagnose
from indexer.query.searcher import Searcher
from indexer.store import Store

# language -> (its document, query words that are not in it but must find it)
CASES = {
    "english": ("The children were running through the gardens", ["gardening", "runs"]),
    "italian": ("Le città italiane hanno molte biblioteche antiche", ["biblioteca", "citta"]),
    "german": ("Die Kinder spielen in den großen Häusern an der Straße", ["Haus", "strasse"]),
    "french": (
        "Les étudiants travaillaient dans les bibliothèques municipales",
        ["bibliothèque", "etudiant"],
    ),
    "spanish": ("Los niños jugaban en las montañas nevadas", ["montaña", "nino"]),
    "portuguese": ("As crianças cantavam nas escolas públicas", ["criança", "publica"]),
    "dutch": ("De kinderen fietsten langs de mooie grachten", ["gracht", "fietst"]),
    "none": ("Hà Nội là thủ đô của Việt Nam", ["HÀ NỘI", "VIỆT"]),  # no inflection: case
}
FILLER = ["A quiet morning by the lake", "Numbers and letters on a board"]


def test_every_language_has_a_case():
    assert set(CASES) == set(LANGUAGES)


@pytest.fixture(scope="module")
def multilingual_store(tiny_model_dir, tmp_path_factory):
    """One store for the module (tests sync its keyword index to the language they need)."""
    from indexer.config import Config

    tmp_path = tmp_path_factory.mktemp("multilingual")
    tiny_config = Config().with_overrides(
        **{
            "model.name": str(tiny_model_dir),
            "model.dtype": "fp32",
            "model.device": "cpu",
            "model.max_length": 16,
            "long_documents.stride": 4,
            "store.path": str(tmp_path / "store"),
            "search.query_encoder": "torch",
        }
    )
    rows = [{"id": lang, "text": text} for lang, (text, _) in CASES.items()]
    rows += [{"id": f"filler{i}", "text": t} for i, t in enumerate(FILLER)]
    corpus = tmp_path / "multi.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    run_index([str(corpus)], tiny_config)  # english, the default
    return tiny_config, corpus


def _found(config, query: str) -> list[str]:
    with Store(config.store.path, read_only=True) as store:
        return [h.id for h in Searcher(config, store).search(query, 3, mode="keyword")]


@pytest.mark.parametrize("language", list(CASES))
def test_inflected_query_finds_its_document(multilingual_store, language):
    config, _ = multilingual_store
    with Store(config.store.path) as store:
        assert sync_keyword_index(store, language)["rebuilt"] is (language != "english")
    assert recorded_language(KeywordIndex.for_store(config.store.path).folder) == language
    for word in CASES[language][1]:
        assert word not in CASES[language][0].split()  # the analyzer makes it match
        assert _found(config, word)[:1] == [language], (language, word)


def test_the_english_stemmer_misses_what_the_language_finds(multilingual_store):
    config, _ = multilingual_store
    with Store(config.store.path) as store:
        sync_keyword_index(store, "english")
    assert _found(config, "biblioteca") == []  # English Snowball: biblioteche -> bibliotech
    assert _found(config, "citta") == []  # English keeps accents
    with Store(config.store.path) as store:
        sync_keyword_index(store, "none")
    assert _found(config, "ha noi") == []  # `none` keeps diacritics: ha != hà
    assert _found(config, "gardening") == []  # and does not stem


def test_language_is_recorded_rebuilt_and_checked(multilingual_store):
    config, corpus = multilingual_store
    italian = config.with_overrides(**{"keyword.language": "italian"})
    with Store(config.store.path) as store:
        sync_keyword_index(store, "english")
    folder = KeywordIndex.for_store(italian.store.path).folder
    assert not (folder / LANGUAGE_FILE).exists()  # english: an index as before the setting
    with Store(italian.store.path, read_only=True) as store:
        found = diagnose(store.path, italian).problems
    assert [p.check for p in found] == ["keyword"] and "'english'" in found[0].message
    summary = run_index([str(corpus)], italian)
    assert summary["index"]["keyword"]["rebuilt"] is True
    assert (folder / LANGUAGE_FILE).read_text() == "italian"
    with Store(italian.store.path, read_only=True) as store:
        hits = Searcher(italian, store).search("biblioteca", 2, mode="keyword")
        assert [h.id for h in hits] == ["italian"]
        assert diagnose(store.path, italian).problems == []
    again = run_index([str(corpus)], italian)["index"]["keyword"]
    assert again["rebuilt"] is False and again["added"] == 0
    assert analyze("Città", "italian") == ["citt"] and analyze("Città", "english") == ["città"]
    with pytest.raises(ConfigError, match="keyword.language 'klingon'.*english, italian"):
        analyze("x", "klingon")
