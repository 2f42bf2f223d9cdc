"""Every request field that scales a route's work has a cap (issue 40), and the reranker's
depth is bounded by the server's config whatever the client asks."""

from __future__ import annotations

import typing
from pathlib import Path

import annotated_types
import pytest
from server_kit import BASE, app_for, prepare

from search import access

pytestmark = pytest.mark.heavy

# fields whose size does not scale work: flags and closed choices
UNSCALED = (bool, type(None))


def _bounded(info) -> bool:
    """A field's metadata names an upper bound (`le`/`lt` for numbers, `max_length` for
    strings, lists and maps)."""
    return any(
        isinstance(m, (annotated_types.Le, annotated_types.Lt, annotated_types.MaxLen))
        for m in info.metadata
    )


def _items_bounded(annotation) -> bool:
    """The items of a list or map are bounded too (`Annotated[str, Field(max_length=...)]`)."""
    for arg in typing.get_args(annotation) or (annotation,):
        if typing.get_origin(arg) in (list, dict):
            return all(_item_bounded(a) for a in typing.get_args(arg))
    return True


def _item_bounded(annotation) -> bool:
    if typing.get_origin(annotation) is not typing.Annotated:
        return annotation not in (str, int)
    return any(_bounded(m) for m in typing.get_args(annotation)[1:] if hasattr(m, "metadata"))


def _scales(annotation) -> bool:
    args = typing.get_args(annotation) or (annotation,)
    if typing.get_origin(annotation) is typing.Literal:
        return False
    return not all(a in UNSCALED or typing.get_origin(a) is typing.Literal for a in args)


def test_every_request_field_that_scales_work_is_capped(tiny_config, small_corpus):
    """Walk the route table: each body model's fields and each query parameter that can grow
    (numbers, strings, lists, maps) declares a maximum."""
    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        fastapi_app = app.app.app
        table = access.route_table(fastapi_app)
        unbounded, seen = [], 0
        for route in fastapi_app.router.routes:
            dependant = getattr(route, "dependant", None)
            if dependant is None or not any(
                (m, route.path) in table for m in getattr(route, "methods", ())
            ):
                continue
            for param in dependant.body_params:
                for name, info in param.field_info.annotation.model_fields.items():
                    seen += 1
                    if _scales(info.annotation) and not (
                        _bounded(info) and _items_bounded(info.annotation)
                    ):
                        unbounded.append(f"{route.path} body.{name}")
            for param in dependant.query_params + dependant.path_params:
                seen += 1
                info = param.field_info
                if (
                    _scales(param.field_info.annotation)
                    and not _bounded(info)
                    and route.path not in ("/static/{name}", "/review/static/{name}")
                ):
                    unbounded.append(f"{route.path} ?{param.name}")
        assert seen > 20
        assert not unbounded, f"request fields without a cap: {unbounded}"


@pytest.mark.parametrize("depth,status", [(100, 200), (101, 400)])
def test_the_rerank_depth_is_capped_by_the_server(tiny_config, small_corpus, depth, status):
    from fastapi.testclient import TestClient

    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        client = TestClient(app, base_url=BASE)
        answer = client.post("/search", json={"query": "cat", "rerank_depth": depth})
        assert answer.status_code == status, answer.text
        if status == 400:
            assert "search.rerank_max_depth: 100" in answer.json()["detail"]


def test_the_guides_route_table_is_the_servers(tiny_config, small_corpus):
    """docs/guides/server.md lists every route with the scope it declares, no more, no less."""
    prepare(tiny_config, small_corpus, scopes=())
    store, app = app_for(tiny_config)
    with store:
        served = {(m, p): s for (m, p), s in access.route_table(app.app.app).items()}
    guide = (Path(__file__).parents[3] / "docs" / "guides" / "server.md").read_text()
    section = guide.split("## Routes", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:4] for line in section.splitlines() if line.startswith("| ")]
    listed = {(m.strip(), p.strip().strip("`")): s.strip() for m, p, s in rows[1:]}
    assert listed == served
