"""The FAISS spec parser (`indexer.records.index_spec`): each part of a factory string read once,
and what the rest of the index code derives from it (search parameter, IDMap, rescoring, memory,
training sample), table-driven; a bad spec names itself and the accepted forms."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from indexer.config import Config
from indexer.errors import ConfigError, VectorIndexError
from indexer.index.auto import estimate_bytes, training_rows, tunable
from indexer.records.index_spec import Codes, parse_spec

FLAT = Codes("Flat")
SQ8 = Codes("SQ", bits=8)

# spec, transforms, nlist, quantizer, hnsw_m, codes, refine, search param, IDMap, removes ids
TABLE = [
    ("Flat", (), None, None, None, FLAT, None, None, True, True),
    ("HNSW32", (), None, None, 32, FLAT, None, "efSearch", True, False),
    ("HNSW16,Flat", (), None, None, 16, FLAT, None, "efSearch", True, False),
    ("HNSW32_SQ8", (), None, None, 32, SQ8, None, "efSearch", True, False),
    ("IVF1024,Flat", (), 1024, "Flat", None, FLAT, None, "nprobe", False, True),
    (
        "IVF1024_HNSW32,PQ32",
        (),
        1024,
        "HNSW32",
        None,
        Codes("PQ", 32, 8),
        None,
        "nprobe",
        False,
        True,
    ),
    (
        "OPQ16_64,IVF4096,PQ16x4fs,RFlat",
        ("OPQ16_64",),
        4096,
        "Flat",
        None,
        Codes("PQ", 16, 4, True),
        FLAT,
        "nprobe",
        True,
        False,
    ),
    (
        "IVF4096,PQ192x4fs,Refine(SQ8)",
        (),
        4096,
        "Flat",
        None,
        Codes("PQ", 192, 4, True),
        SQ8,
        "nprobe",
        True,
        False,
    ),
    ("IVF12,SQ8", (), 12, "Flat", None, SQ8, None, "nprobe", False, True),
    ("PQ16", (), None, None, None, Codes("PQ", 16, 8), None, None, True, True),
]


@pytest.mark.parametrize(
    (
        "spec",
        "transforms",
        "nlist",
        "quantizer",
        "hnsw_m",
        "codes",
        "refine",
        "param",
        "id_map",
        "removes",
    ),
    TABLE,
)
def test_parse(spec, transforms, nlist, quantizer, hnsw_m, codes, refine, param, id_map, removes):
    parsed = parse_spec(spec)
    assert (parsed.transforms, parsed.nlist, parsed.quantizer, parsed.hnsw_m) == (
        transforms,
        nlist,
        quantizer,
        hnsw_m,
    )
    assert (parsed.codes, parsed.refine) == (codes, refine)
    assert parsed.search_param == param
    assert parsed.needs_id_map is id_map
    assert parsed.removes_ids is removes
    assert (tunable(spec) is None) == (param is None)


@pytest.mark.parametrize("spec", [row[0] for row in TABLE])
def test_every_table_spec_is_a_faiss_factory_string(spec):
    parsed = parse_spec(spec)
    factory = f"IDMap2,{spec}" if parsed.needs_id_map else spec
    index = faiss.index_factory(384, factory, faiss.METRIC_INNER_PRODUCT)
    if not parsed.removes_ids:  # what the parser says FAISS cannot do, FAISS cannot do
        with pytest.raises(RuntimeError):
            index.remove_ids(faiss.IDSelectorBatch(np.zeros(0, np.int64)))


def test_ivf_with_an_hnsw_quantizer_has_its_list_count_everywhere():
    """Three parsers used to give three answers for `IVF1024_HNSW32` (0, 102432, none)."""
    spec = "IVF1024_HNSW32,Flat"
    assert parse_spec(spec).nlist == 1024
    param, values = tunable(spec)
    assert param == "nprobe" and values[-1] == 1024
    assert len(training_rows(10**6, spec, per_list=100)) == 1024 * 100
    centroids = 1024 * 32 * 4 + 1024 * (8 * 32 + 16)  # the quantizer's vectors and graph
    assert estimate_bytes(spec, 1000, 32) == 1000 * (32 * 4 + 8) + centroids


def test_memory_of_a_pre_transformed_index_counts_the_reduced_dimension():
    # PQ16x4fs codes (8 bytes) + RFlat full vectors (4·128) + IDMap2; centroids of dim 64
    assert estimate_bytes("OPQ16_64,IVF4096,PQ16x4fs,RFlat", 1000, 128) == (
        1000 * (8 + 512 + 56) + 4096 * 64 * 4
    )


@pytest.mark.parametrize(
    ("spec", "part"),
    [
        ("IVF1024", "needs codes after it"),
        ("IMI2x10,Flat", "'IMI2x10' is not a code"),
        ("HNSW32,XQ", "'XQ' is not a rescoring stage"),
        ("IVF12,Flat,RFlat,RFlat", "after the last stage"),
        ("Flat,", "'' is not a rescoring stage"),
    ],
)
def test_a_bad_spec_names_itself_the_part_and_the_accepted_forms(spec, part):
    with pytest.raises(VectorIndexError) as err:
        parse_spec(spec)
    message = str(err.value)
    assert f"index.spec '{spec}'" in message and part in message
    assert "`IVF1024_HNSW32,PQ32`" in message and "`auto`" in message


def test_config_rejects_a_bad_spec_at_load_naming_the_key():
    with pytest.raises(ConfigError, match=r"'index.spec'.*needs codes after it"):
        Config().with_overrides(**{"index.spec": "IVF1024"})
    assert Config().with_overrides(**{"index.spec": "HNSW8"}).index.spec == "HNSW8"
