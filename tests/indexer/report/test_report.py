"""The trends report on a tiny hand-made store: week, day and field buckets computed by hand
(ISO strings with offsets, epoch seconds and milliseconds), the unknown bucket, entity changes
and rising entities, waves per bucket, errors for a missing time field, the JSON lines of the
CLI, and the HTML page in a real headless chromium (no console errors, every plot drawn)."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from dedup_kit import add_docs, basis, near, unit

from indexer.config import Config
from indexer.dedup.groups import run_dedup
from indexer.errors import InputError
from indexer.records.annotations import Annotation, Entity, Label
from indexer.report.html import figures, render_html
from indexer.report.trends import build_report, write_scheduled_report
from indexer.store import Store
from search.cli.main import main

pytestmark = pytest.mark.heavy

# (id, time, src, (label, score) of head `sent`, [(type, text)] of head `ner`)
DOCS = [
    ("d1", "2024-01-01T10:00:00Z", "web", ("pos", 0.9), [("ORG", "Acme")]),
    ("d2", "2024-01-03", "web", ("neg", 0.6), [("ORG", "acme"), ("PER", "Bob")]),
    ("d3", 1704758400, "app", ("pos", 0.8), [("ORG", "Acme")]),  # 2024-01-09 00:00 UTC
    ("d4", "2024-01-10T23:30:00-02:00", "app", ("pos", 0.7), [("ORG", "Zed")]),  # 01-11 UTC
    ("d5", "garbage", "web", ("pos", 1.0), []),
    ("d6", None, None, None, []),
    ("d7", 1704758400000, "app", ("neg", 0.5), [("ORG", "Zed"), ("PER", "Bob")]),  # ms
]


@pytest.fixture
def store_config(tmp_path) -> Config:
    config = Config().with_overrides(
        **{
            "store.path": str(tmp_path / "store"),
            "index.spec": "Flat",
            "dedup.min_size": 2,
            "dedup.min_jaccard": 0.0,
        }
    )
    e = basis()
    vectors = [
        unit(e[0]),
        near(e[0], 1),
        near(e[0], 2),
        unit(e[1]),
        unit(e[2]),
        unit(e[3]),
        unit(e[4]),
    ]  # d1, d2, d3: one wave
    docs = []
    for (doc, t, src, _, _), v in zip(DOCS, vectors):
        meta = {k: val for k, val in (("t", t), ("src", src)) if val is not None}
        docs.append((doc, f"text of {doc} Acme Bob Zed", v, meta))
    ids = add_docs(config, docs)
    with Store(config.store.path) as store:
        texts = dict(zip(ids, (d[1] for d in docs)))
        rows, notes = [], []
        for doc_id, (_, _, _, label, ents) in zip(ids, DOCS):
            if label is None:
                continue
            rows.append((doc_id, texts[doc_id], "h"))
            notes.append(
                Annotation(
                    labels=[Label(label[0], label[1], "sent")],
                    entities=[Entity(t, 0, len(x), x, 0.9, "ner") for t, x in ents],
                )
            )
        store.annotations.write(rows, notes, {"sent": "v1", "ner": "v1"})
    run_dedup(config, "c")
    return config


def report(config: Config, **kwargs) -> dict:
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        return build_report(store, config, **kwargs)


def test_week_buckets_by_hand(store_config):
    r = report(store_config, by="week", time_field="t")
    assert [(b["bucket"], b["documents"]) for b in r["buckets"]] == [
        ("2024-01-01", 2),
        ("2024-01-08", 3),
        ("unknown", 2),
    ]
    w1, w2, unknown = r["buckets"]
    assert w1["heads"]["sent"] == {
        "documents": 2,
        "mean_score": 0.75,
        "labels": {
            "neg": {"count": 1, "mean_score": 0.6, "share": 0.5},
            "pos": {"count": 1, "mean_score": 0.9, "share": 0.5},
        },
    }
    assert w2["heads"]["sent"]["labels"]["pos"] == {"count": 2, "mean_score": 0.75, "share": 0.6667}
    assert w2["heads"]["sent"]["mean_score"] == pytest.approx(0.6667, abs=1e-4)
    assert unknown["heads"]["sent"]["labels"] == {
        "pos": {"count": 1, "mean_score": 1.0, "share": 1.0}
    }
    # entities: documents mentioning them (case folded), change against the previous week
    assert w1["entities"] == {
        "ORG": [{"text": "acme", "count": 2, "change": None}],
        "PER": [{"text": "bob", "count": 1, "change": None}],
    }
    assert w2["entities"]["ORG"] == [
        {"text": "zed", "count": 2, "change": 2},
        {"text": "acme", "count": 1, "change": -1},
    ]
    assert w2["entities"]["PER"] == [{"text": "bob", "count": 1, "change": 0}]
    assert w2["rising"][0] == {
        "type": "ORG",
        "text": "zed",
        "count": 2,
        "share": 0.6667,
        "share_change": 0.6667,
    }
    assert w1["rising"] == [] and unknown["rising"] == []
    # the wave d1, d2, d3 (group of 3): two copies in week 1, one in week 2
    assert [(w["in_bucket"], w["size"]) for w in w1["waves"]] == [(2, 3)]
    assert [(w["in_bucket"], w["size"]) for w in w2["waves"]] == [(1, 3)]
    assert r["histograms"]["sent"]["pos"][9] == 2  # 0.9 and 1.0 in the last bin
    assert r["documents"] == 7


def test_day_field_and_window(store_config):
    days = report(store_config, by="day", time_field="t")
    assert [(b["bucket"], b["documents"]) for b in days["buckets"]] == [
        ("2024-01-01", 1),
        ("2024-01-03", 1),
        ("2024-01-09", 2),
        ("2024-01-11", 1),
        ("unknown", 2),
    ]
    by_src = report(store_config, by="src")
    assert [(b["bucket"], b["documents"]) for b in by_src["buckets"]] == [
        ("app", 3),
        ("web", 3),
        ("unknown", 1),
    ]
    assert all(
        e["change"] is None for b in by_src["buckets"] for es in b["entities"].values() for e in es
    )
    window = report(store_config, by="week", time_field="t", since="2024-01-08", until="2024-01-10")
    assert [(b["bucket"], b["documents"]) for b in window["buckets"]] == [
        ("2024-01-08", 2),
        ("unknown", 2),
    ]  # d3, d7 (01-09); d4 is 01-11 UTC


def test_missing_time_field_is_an_error_naming_it(store_config):
    with pytest.raises(InputError, match="metadata field 'posted_at' \\(--time-field\\)"):
        report(store_config, by="week", time_field="posted_at")
    with pytest.raises(InputError, match="--time-field FIELD or set fields.time"):
        report(store_config, by="week")
    with pytest.raises(InputError, match="'lang' \\(--by\\)"):
        report(store_config, by="lang")
    with pytest.raises(InputError, match="--since 'yesterday'"):
        report(store_config, by="week", time_field="t", since="yesterday")


def test_cli_json_one_object_per_bucket(store_config, tmp_path):
    cfg = tmp_path / "config.yaml"
    cfg.write_text(f"store: {{path: {store_config.store.path}}}\nfields: {{time: t}}\n")
    result = CliRunner().invoke(main, ["report", "--config", str(cfg), "--json", "--heads", "sent"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(x) for x in result.output.strip().splitlines()]
    assert [b["bucket"] for b in lines] == ["2024-01-01", "2024-01-08", "unknown"]
    bad = CliRunner().invoke(main, ["report", "--config", str(cfg), "--time-field", "nope"])
    assert bad.exit_code == 1 and "'nope'" in bad.output and bad.output.count("\n") == 1


def test_scheduled_report_files_and_status(store_config, tmp_path):
    folder = tmp_path / "reports"
    data = store_config.model_dump()
    data["fields"]["time"] = "t"
    data["schedules"] = {"report": {"folder": str(folder), "by": "week"}}
    config = Config.model_validate(data)
    out = write_scheduled_report(config)
    assert out["buckets"] == 3
    assert json.loads((folder / "report.json").read_text())["documents"] == 7
    assert "Plotly.newPlot" in (folder / "report.html").read_text()
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        assert store.runs.last_of("report")["status"] == "completed"


def test_report_schedule_config_checks():
    ok = Config.model_validate({"schedules": {"report": {"folder": "out"}}})
    assert ok.schedules["report"].folder == "out"
    with pytest.raises(Exception, match="only report takes by"):
        Config.model_validate({"schedules": {"reindex": {"interval": 60, "by": "day"}}})
    with pytest.raises(Exception, match="needs 'folder:'"):
        Config.model_validate({"schedules": {"report": {}}})
    with pytest.raises(Exception, match="runs after each annotate run"):
        Config.model_validate({"schedules": {"report": {"folder": "x", "interval": 60}}})
    with pytest.raises(Exception, match="exactly one of 'cron'"):
        Config.model_validate({"schedules": {"reindex": {}}})


def test_html_renders_in_headless_chromium(store_config, tmp_path):
    from browser import console_errors, headless_chromium, screenshot

    r = report(store_config, by="week", time_field="t")
    page = tmp_path / "report.html"
    text = render_html(r)
    assert not re.search(r"<script[^>]*\ssrc=|<link[^>]*href=", text)  # nothing fetched
    page.write_text(text, encoding="utf-8")
    expected = len(figures(r))
    assert expected == 4  # documents, share of `sent`, entities, scores of `sent`
    with headless_chromium() as driver:
        driver.get(page.as_uri())
        drawn = driver.execute_script(
            "return document.querySelectorAll('.js-plotly-plot .main-svg').length > 0 ? "
            "document.querySelectorAll('.js-plotly-plot').length : 0"
        )
        bars = driver.execute_script("return document.querySelectorAll('.bars .point').length")
        errors = console_errors(driver)
        shot = screenshot(driver, tmp_path / "report.png")
    assert errors == []
    assert drawn == expected
    assert bars > 10
    assert shot.stat().st_size > 10_000
