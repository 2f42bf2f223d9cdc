"""The trends report as one self-contained HTML page: Plotly figures (label share per bucket,
stacked; documents per bucket; top entities with their change; score histogram per label) and
the largest waves, with plotly.js inlined so the file opens offline, with no CDN.

Plotly rather than Altair/Vega-Lite: one inlined script (plotly.js) instead of three (vega,
vega-lite, vega-embed), stacked bars, grouped histograms and hover text built in, and the
figures are plain Python dicts a test can read back.
"""

from __future__ import annotations

import html
import json

from indexer.store import UNKNOWN

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem auto; max-width: 1100px; color: #222; }}
h1 {{ font-size: 1.4rem; }} h2 {{ font-size: 1.1rem; margin-top: 2rem; }}
.meta {{ color: #666; font-size: .9rem; }}
table {{ border-collapse: collapse; font-size: .85rem; width: 100%; }}
td, th {{ border-bottom: 1px solid #ddd; padding: .3rem .5rem; text-align: left;
         vertical-align: top; }}
.plot {{ min-height: 360px; }}
</style>
{plotly}
</head><body>
<h1>{title}</h1>
<p class="meta">{meta}</p>
{body}
</body></html>
"""


def _plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return f"<script>{get_plotlyjs()}</script>"


def _figure(div_id: str, data: list, layout: dict) -> str:
    spec = json.dumps({"data": data, "layout": layout}, ensure_ascii=False, default=str)
    spec = spec.replace("</", "<\\/")  # no text can close the script element
    return (
        f'<div id="{div_id}" class="plot"></div><script>(function() {{ var f = {spec}; '
        f'Plotly.newPlot("{div_id}", f.data, f.layout, {{responsive: true}}); }})();'
        "</script>"
    )


Figure = tuple[str, str, list, dict]  # div id, heading, Plotly traces, layout


def figures(report: dict) -> list[Figure]:
    """The report's figures as Plotly specs, in page order: documents per bucket, each head's
    label shares, the latest bucket's top entities, each head's score histograms."""
    return [
        _documents_figure(report),
        *_share_figures(report),
        *_entities_figure(report),
        *_score_figures(report),
    ]


def _documents_figure(report: dict) -> Figure:
    buckets = report["buckets"]
    names = [b["bucket"] for b in buckets]
    trace = {
        "type": "bar",
        "x": names,
        "y": [b["documents"] for b in buckets],
        "marker": {"color": ["#bbb" if n == UNKNOWN else "#4c78a8" for n in names]},
        "name": "documents",
    }
    layout = {
        "xaxis": {"type": "category", "title": report["by"]},
        "yaxis": {"title": "documents"},
        "margin": {"t": 20},
    }
    return "documents", "Documents per bucket", [trace], layout


def _share_figures(report: dict) -> list[Figure]:
    buckets = report["buckets"]
    names = [b["bucket"] for b in buckets]
    out = []
    for i, head in enumerate(sorted({h for b in buckets for h in b["heads"]})):
        per_bucket = [b["heads"].get(head, {}).get("labels", {}) for b in buckets]
        labels = sorted({lab for shares in per_bucket for lab in shares})
        traces = [
            {
                "type": "bar",
                "name": lab,
                "x": names,
                "y": [shares.get(lab, {}).get("share", 0) for shares in per_bucket],
                "customdata": [shares.get(lab, {}).get("count", 0) for shares in per_bucket],
                "hovertemplate": "%{x}: %{y:.1%} (%{customdata} documents)",
            }
            for lab in labels
        ]
        layout = {
            "barmode": "stack",
            "xaxis": {"type": "category", "title": report["by"]},
            "yaxis": {"title": "share", "tickformat": ".0%", "range": [0, 1]},
            "margin": {"t": 20},
        }
        out.append((f"share-{i}", f"Label share per bucket: {head}", traces, layout))
    return out


def _entities_figure(report: dict) -> list[Figure]:
    """The latest time bucket's 15 most frequent entities with their change (none: [])."""
    timed = [b for b in report["buckets"] if b["bucket"] != UNKNOWN]
    if not timed:
        return []
    latest = timed[-1]
    top = sorted(
        ((etype, e) for etype, items in latest["entities"].items() for e in items),
        key=lambda x: (-x[1]["count"], x[1]["text"]),
    )[:15]
    if not top:
        return []
    changes = [e["change"] for _, e in top][::-1]
    previous = timed[-2]["bucket"] if len(timed) > 1 and report["time_field"] else None
    heading = f"Top entities in {latest['bucket']}" + (
        f" (change against {previous})" if previous else ""
    )
    trace = {
        "type": "bar",
        "orientation": "h",
        "y": [f"{e['text']} ({etype})" for etype, e in top][::-1],
        "x": [e["count"] for _, e in top][::-1],
        "text": ["" if c is None else f"{c:+d}" for c in changes],
        "textposition": "outside",
        "marker": {
            "color": ["#bbb" if c is None else "#54a24b" if c >= 0 else "#e45756" for c in changes]
        },
        "hovertemplate": "%{y}: %{x} documents (%{text})",
    }
    layout = {"margin": {"t": 20, "l": 200}, "xaxis": {"title": "documents"}}
    return [("entities", heading, [trace], layout)]


def _score_figures(report: dict) -> list[Figure]:
    bins = report["bins"]
    edges = [round(i / bins, 3) for i in range(bins)]
    layout = {
        "barmode": "group",
        "xaxis": {"title": "score", "range": [0, 1]},
        "yaxis": {"title": "documents"},
        "margin": {"t": 20},
    }
    return [
        (
            f"scores-{i}",
            f"Score histogram per label: {head}",
            [
                {"type": "bar", "name": lab, "x": [e + 0.5 / bins for e in edges], "y": counts}
                for lab, counts in sorted(per_label.items())
            ],
            layout,
        )
        for i, (head, per_label) in enumerate(sorted(report["histograms"].items()))
    ]


def _waves_table(report: dict) -> str:
    rows = []
    for b in report["buckets"]:
        for w in b["waves"]:
            rows.append(
                f"<tr><td>{html.escape(b['bucket'])}</td><td>{w['in_bucket']}</td>"
                f"<td>{w['size']}</td><td>{html.escape(w['representative'] or '')}</td></tr>"
            )
    if not rows:
        return '<p class="meta">No near-duplicate waves stored (run `bertindex dedup`).</p>'
    return (
        "<table><tr><th>bucket</th><th>copies in bucket</th><th>group size</th>"
        "<th>representative text</th></tr>" + "".join(rows) + "</table>"
    )


def _rising_table(report: dict, last: int = 6) -> str:
    rows = []
    for b in [b for b in report["buckets"] if b["rising"]][-last:][::-1]:  # latest first
        for r in b["rising"][:5]:
            rows.append(
                f"<tr><td>{html.escape(b['bucket'])}</td><td>{html.escape(r['text'])}</td>"
                f"<td>{html.escape(r['type'])}</td><td>{r['count']}</td>"
                f"<td>{r['share_change']:+.1%}</td></tr>"
            )
    if not rows:
        return '<p class="meta">No rising entities (needs entities and two time buckets).</p>'
    return (
        "<table><tr><th>bucket</th><th>entity</th><th>type</th><th>documents</th>"
        "<th>share change</th></tr>" + "".join(rows) + "</table>"
    )


def render_html(report: dict) -> str:
    """One HTML page, plotly.js inlined (opens offline).

    Args:
        report: `indexer.report.trends.build_report` output.
    Returns:
        The page's text.
    """
    parts = []
    for div_id, heading, data, layout in figures(report):
        parts.append(f"<h2>{html.escape(heading)}</h2>" + _figure(div_id, data, layout))
    parts.append("<h2>Rising entities (latest buckets first)</h2>" + _rising_table(report))
    parts.append("<h2>Largest near-duplicate waves</h2>" + _waves_table(report))
    scope = report["collection"] or "all collections"
    by = report["by"] + (f" of {report['time_field']}" if report["time_field"] else "")
    unknown = next((b["documents"] for b in report["buckets"] if b["bucket"] == UNKNOWN), 0)
    meta = (
        f"{report['documents']} documents in {scope}, by {by}; {unknown} without a readable "
        f"value (bucket '{UNKNOWN}'); generated {report['generated_at']} UTC"
    )
    return PAGE.format(
        title=html.escape(f"bertindex report: {scope}"),
        meta=html.escape(meta),
        plotly=_plotly_js(),
        body="\n".join(parts),
    )
