"""Bad input, tried by a machine: Schemathesis generates requests for every route of `bertindex
serve` (valid ones and ones that break the schema: wrong types, missing fields, out-of-range
numbers, odd strings) from the app's OpenAPI schema, built here only (the server has
`openapi_url=None`), and sends them in process through the whole ASGI stack (body limit,
access guard, routes). No answer may be a 5xx or take long, and no request may write outside
its token's scope: with a `read` token the store is left as it was (a token's last use
aside), with a `review` token only the review history (and the data version) may change.

Bounded for `make test`: a fixed number of examples per run, derandomized (the same requests
on every run), no example database.
"""

from __future__ import annotations

import concurrent.futures
import copy
import hashlib
from pathlib import Path
from typing import ForwardRef

import pytest
from server_kit import BASE, app_for, prepare

from indexer.store import Store

pytestmark = pytest.mark.heavy
EXAMPLES = 150  # per token: ~300 requests in all, a few seconds on two cores
SLOW_S = 10.0  # an answer slower than this counts as a hang
# the tables a scope may change: every request records its token's last use; a label steps
# the data version (the next publish carries it)
MAY_CHANGE = {"read": {"tokens"}, "review": {"tokens", "reviews", "data_version"}}


def schema_of(app) -> dict:
    """The OpenAPI document of the server's FastAPI app with every route in it, the page routes
    (left out of the production schema) too.

    Routes that return a `Response` name it in a string annotation FastAPI cannot resolve (the
    routes import it inside `create_app`); it never serialises through that model, so the
    copies here drop it rather than describe it.
    """
    from fastapi.openapi.utils import get_openapi

    routes = []
    for route in app.app.app.routes:
        route = copy.copy(route)
        route.include_in_schema = True
        if isinstance(getattr(route, "response_model", None), ForwardRef):
            route.response_model = route.response_field = None
        routes.append(route)
    return get_openapi(title="bertindex", version="test", routes=routes)


def narrowed(schema: dict, facts: dict) -> dict:
    """`schema` with the names this store knows as the only valid values (head, labels,
    collections, metadata, files, doc ids), so that generated valid requests reach deep (a
    label stored, filters that match) and invalid ones are everything else.

    Args:
        schema: from `schema_of` (changed in place and returned).
        facts: `doc_ids` (min, max), `heads`, `labels` (names of the head's labels),
            `collections`, `where` (field -> values), `files` (route path -> names).
    """
    parts = schema["components"]["schemas"]
    head = {"enum": facts["heads"]}
    lo, hi = facts["doc_ids"]
    for model in ("Filters", "SearchRequest"):
        props = parts[model]["properties"]
        props["collection"] = {"anyOf": [{"enum": facts["collections"]}, {"type": "null"}]}
        props["labels"]["items"] = {
            "enum": [f"{h}={name}" for h in facts["heads"] for name in facts["labels"]]
        }
        props["where"] = {
            "type": "object",
            "additionalProperties": False,
            "properties": {k: {"enum": v} for k, v in facts["where"].items()},
        }
    label = parts["LabelRequest"]["properties"]
    label.update(
        head=head,
        label={"enum": facts["labels"]},
        doc_id={"type": "integer", "minimum": lo, "maximum": hi},
    )
    parts["UndoRequest"]["properties"].update(head=head)
    values = {
        "head": head,
        "strategy": {"enum": ["uncertain", "margin", "random"]},
        "collection": {"enum": facts["collections"]},
    }
    for path, operations in schema["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                name = parameter["name"]
                if parameter["in"] == "path":
                    parameter["schema"] = {"enum": facts["files"][path]}
                elif name in values:
                    parameter["schema"] = values[name]
    return schema


def store_facts(store_path: str | Path) -> dict:
    """What `narrowed` needs, read from the store `prepare` built."""
    from search.review_page import PAGE_FILES
    from search.server import STATIC_FILES

    with Store(store_path, read_only=True, snapshot=False) as store:
        con = store.con
        lo, hi = con.execute("SELECT min(doc_id), max(doc_id) FROM documents").fetchone()
        collections = [
            r[0] for r in con.execute("SELECT DISTINCT collection FROM documents").fetchall()
        ]
    return {
        "doc_ids": (lo, hi),
        "heads": ["kind"],
        "labels": ["code", "pet"],
        "collections": collections,
        "where": {"kind": ["pet", "code", "long"], "lang": ["en", "xx"]},
        "files": {
            "/static/{name}": sorted(STATIC_FILES),
            "/review/static/{name}": sorted(PAGE_FILES),
        },
    }


def table_digests(store_path: str | Path) -> dict[str, str]:
    """A digest of every table's rows in the live store; the data version (`meta`'s key that
    every write transaction steps) apart from the rest of `meta`."""

    def digest(sql: str) -> str:
        rows = sorted(map(repr, store.con.execute(sql).fetchall()))
        return hashlib.sha256(repr(rows).encode()).hexdigest()

    with Store(store_path, read_only=True, snapshot=False) as store:
        names = [
            r[0]
            for r in store.con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                "AND table_type = 'BASE TABLE'"
            ).fetchall()
        ]
        digests = {name: digest(f'SELECT * FROM "{name}"') for name in names}
        digests["meta"] = digest("SELECT * FROM meta WHERE key <> 'data_version'")
        digests["data_version"] = digest("SELECT * FROM meta WHERE key = 'data_version'")
        return digests


def file_digests(store_path: str | Path) -> dict[str, str]:
    """A digest of every file of the store but the live database (indexes, snapshots)."""
    root = Path(store_path)
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.startswith("store.duckdb") and p.suffix != ".lock"
    }


def fuzz(app, token: str, facts: dict) -> dict:
    """Send EXAMPLES generated requests (valid and invalid, every route) with `token`; returns
    the count of requests and of answers per status."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    schema = schemathesis.openapi.from_dict(narrowed(schema_of(app), facts))
    schema.app = app  # in process, through BodyLimit and the access guard
    cases = st.one_of(
        schema.as_strategy(GenerationMode.POSITIVE), schema.as_strategy(GenerationMode.NEGATIVE)
    )
    seen: dict = {"requests": 0, "statuses": {}}

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],
    )
    @given(case=cases)
    def one(case) -> None:
        where = f"{case.method} {case.formatted_path}: {case.as_curl_command()}"
        call = caller.submit(case.call, base_url=BASE, headers={"Authorization": f"Bearer {token}"})
        try:  # a hang fails the test instead of stalling the run
            answer = call.result(timeout=SLOW_S)
        except concurrent.futures.TimeoutError:
            pytest.fail(f"{where}: no answer in {SLOW_S} s")
        seen["requests"] += 1
        seen["statuses"][answer.status_code] = seen["statuses"].get(answer.status_code, 0) + 1
        assert answer.status_code < 500, f"{where} -> {answer.status_code} {answer.text[:500]}"

    caller = concurrent.futures.ThreadPoolExecutor(1)
    try:
        one()
    finally:
        caller.shutdown(wait=False, cancel_futures=True)  # not waiting on a hung call
    return seen


@pytest.mark.parametrize("scope", ["read", "review"])
def test_generated_requests_get_no_5xx_and_write_only_in_scope(tiny_config, small_corpus, scope):
    tokens = prepare(tiny_config, small_corpus)
    path = tiny_config.store.path
    tables, files = table_digests(path), file_digests(path)
    facts = store_facts(path)
    store, app = app_for(tiny_config)
    with store:
        seen = fuzz(app, tokens[scope], facts)
    print(f"\n{scope} token: {seen['requests']} requests, statuses {seen['statuses']}")
    assert seen["requests"] >= EXAMPLES // 2
    assert file_digests(path) == files
    after = table_digests(path)
    changed = {name for name in tables if after.get(name) != tables[name]}
    assert changed <= MAY_CHANGE[scope], f"{scope} token changed {changed - MAY_CHANGE[scope]}"
    assert set(after) == set(tables)
    if scope == "review":
        assert "reviews" in changed  # generated labels were stored: the check above has teeth
