"""What the access checks of `bertindex serve` (`search.access.AccessGuard`) add to a request:
the guard called directly as ASGI middleware over an app that answers at once, on a store
with no token and with `--tokens` tokens, for an open route, a read with a valid token, a
refused token and a foreign Host. No model or index is loaded.

Prints microseconds per request (median of `--repeats` runs of `--n` requests) as JSON and
writes it to `--out`.
Usage: python benchmarks/access_overhead.py [--n 20000] [--tokens 20] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from fastapi import FastAPI

from indexer.store import Store
from search.access import OPEN, AccessGuard, TokenBook, needs


def build(store_dir: Path, tokens: int) -> tuple[AccessGuard, str | None]:
    app = FastAPI()

    @app.post("/search", dependencies=[needs("read")])
    def search() -> dict:  # never reached: the benchmark's inner app answers instead
        return {}

    @app.get("/health", dependencies=[needs(OPEN)])
    def health() -> dict:
        return {}

    token = None
    with Store(store_dir) as store:
        for i in range(tokens):
            token = store.tokens.create(f"user{i}", "read")
    guard = AccessGuard(app, TokenBook(store_dir))

    async def answer(scope, receive, send):  # stands in for the routes: the guard alone is timed
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    guard.app = answer
    guard.app.router = app.router  # route matching uses the real app's routes
    return guard, token


def scope(path: str, method: str, headers: dict) -> dict:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "scheme": "http",
        "query_string": b"",
        "server": ("127.0.0.1", 8765),
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
    }


async def run(guard, request: dict, n: int) -> tuple[float, int]:
    status = []

    async def send(message):
        if message["type"] == "http.response.start":
            status.append(message["status"])

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    t = time.perf_counter()
    for _ in range(n):
        await guard(dict(request), receive, send)
    return (time.perf_counter() - t) / n * 1e6, status[-1]


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what `platform` knows."""
    try:
        for line in open("/proc/cpuinfo"):  # noqa: SIM115 - a short read
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "access_overhead.json"
    )
    args = parser.parse_args()
    out = {
        "cpu": cpu_name(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "n": args.n,
        "tokens": args.tokens,
        "us_per_request": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        plain, _ = build(Path(tmp) / "plain", 0)
        guarded, token = build(Path(tmp) / "tokens", args.tokens)
        host = {"Host": "127.0.0.1:8765"}
        cases = {
            "no tokens, POST /search": (plain, scope("/search", "POST", host)),
            "tokens, GET /health (open)": (guarded, scope("/health", "GET", host)),
            "tokens, POST /search, valid token": (
                guarded,
                scope("/search", "POST", {**host, "Authorization": f"Bearer {token}"}),
            ),
            "tokens, POST /search, wrong token (401)": (
                guarded,
                scope("/search", "POST", {**host, "Authorization": "Bearer bi_wrong"}),
            ),
            "foreign Host (403)": (guarded, scope("/search", "POST", {"Host": "evil.example"})),
        }
        for name, (guard, request) in cases.items():
            times, status = [], None
            for _ in range(args.repeats):
                us, status = asyncio.run(run(guard, request, args.n))
                times.append(us)
            out["us_per_request"][name] = {
                "median_us": round(statistics.median(times), 2),
                "status": status,
            }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
