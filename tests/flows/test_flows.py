"""Flows in production: retries and failed-batch reports under Prefect, the Dask runner,
schedules from config.yaml (`flows serve` / `flows list`), `delete` and `status` via the CLI.

One Prefect test harness (temporary API) for the session (tests/conftest.py); one Dask LocalCluster
(two worker processes) for the Dask test.
"""

from __future__ import annotations

import errno
import json
from datetime import datetime, timezone

import pytest
import yaml
from click.testing import CliRunner
from crash_kit import assert_same_results, results, write_corpus

from flows.index_corpus import flow_for
from indexer.config import load_config
from indexer.indexing.run import run_index
from indexer.ingest.readers import FieldMap
from indexer.ops.consistency import check_store
from search.cli.main import main

pytestmark = pytest.mark.heavy


def write_config(path, tiny_model_dir, store, **sections):
    path.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "name": str(tiny_model_dir),
                    "dtype": "fp32",
                    "device": "cpu",
                    "max_length": 16,
                },
                "long_documents": {"stride": 4},
                "store": {"path": str(store)},
                **sections,
            }
        )
    )
    return path


def test_failed_batch_is_retried_then_reported(prefect_api, tiny_config, tmp_path, monkeypatch):
    import flows.index_corpus as flow_module

    corpus = write_corpus(tmp_path / "docs.jsonl", 300, seed=2)
    real = flow_module.commit_batch
    calls = {"flaky": 0, "full": 0}

    def failing(plan, chunks, store, run_id):
        rows = [r.row for r in plan.batch.records]
        if 150 in rows:  # the second batch: fails once (retried), the third always
            calls["flaky"] += 1
            if calls["flaky"] == 1:
                raise OSError("disk hiccup")
        if 250 in rows:
            calls["full"] += 1
            raise OSError(errno.ENOSPC, "disk full")
        return real(plan, chunks, store, run_id)

    monkeypatch.setattr(flow_module, "commit_batch", failing)
    summary = flow_for(tiny_config)([str(corpus)], tiny_config, batch_size=100)
    assert calls["flaky"] == 2  # failed once, retried (flows.retry)
    assert calls["full"] == 1  # a full disk needs a person: not retried (flows.retry)
    assert len(summary["failed_batches"]) == 1
    assert "disk full" in summary["failed_batches"][0]["error"]
    assert "rows 201-" in summary["failed_batches"][0]["batch"]
    assert summary["encoded"] == 200  # the other batches are stored
    monkeypatch.setattr(flow_module, "commit_batch", real)
    again = run_index([str(corpus)], tiny_config, batch_size=100)
    assert (again["encoded"], again["failed_batches"]) == (100, [])  # a re-run retries it
    assert check_store(tiny_config).problems == []


def test_dask_runner_gives_the_store_of_the_local_runner(prefect_api, tiny_config, tmp_path):
    from distributed import LocalCluster

    corpus = write_corpus(tmp_path / "docs.jsonl", 300, seed=4)
    run_index([str(corpus)], tiny_config, batch_size=50)
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        env={"OMP_NUM_THREADS": "1"},
    ) as cluster:
        dask_cfg = tiny_config.with_overrides(
            **{
                "store.path": str(tmp_path / "dask-store"),
                "runner": "dask",
                "dask.address": cluster.scheduler_address,
                "dask.in_flight": 3,
            }
        )
        summary = flow_for(dask_cfg)([str(corpus)], dask_cfg, "default", "auto", FieldMap(), 50)
        with cluster.get_client() as client:
            encoded_on = client.run(
                lambda: (
                    __import__("indexer.encode.encoder")
                    .encode.encoder.load_encoder.cache_info()
                    .currsize
                )
            )
    assert summary["encoded"] == 300 and summary["failed_batches"] == []
    assert sum(encoded_on.values()) == 2  # both workers loaded the encoder and encoded
    local, dask = check_store(tiny_config), check_store(dask_cfg)
    assert local.problems == [] and dask.problems == []
    assert dask.differences(local) == []
    assert_same_results(dask_cfg, tiny_config)  # other batch shapes: near-ties may swap


@pytest.fixture
def scheduled_config(tmp_path, tiny_model_dir, small_corpus):
    return write_config(
        tmp_path / "config.yaml",
        tiny_model_dir,
        tmp_path / "store",
        sources={
            "docs": {"paths": [str(small_corpus)], "collection": "docs", "on_missing": "delete"}
        },
        schedules={
            "index_corpus": {"cron": "*/15 * * * *"},
            "annotate": {
                "interval": 600,
                "heads": [str(tmp_path / "heads" / "clf")],
                "inbox": str(tmp_path / "inbox"),
            },
            "reindex": {"interval": 86400, "active": False},
        },
    )


def test_flows_serve_registers_the_configured_schedules(scheduled_config, serve_flows):
    deployments, limit = serve_flows(scheduled_config)
    by_name = {d.name: d for d in deployments}
    assert set(by_name) == {"index_corpus", "annotate", "reindex"} and limit == 1
    index = by_name["index_corpus"]
    assert index.entrypoint == "flows.schedules.index_sources"
    assert index.schedules[0].schedule.cron == "*/15 * * * *" and index.schedules[0].active
    assert index.parameters["config_path"] == str(scheduled_config.resolve())
    reindex = by_name["reindex"]
    assert reindex.schedules[0].schedule.interval.total_seconds() == 86400
    assert reindex.schedules[0].active is False


def test_flows_list_shows_next_runs(scheduled_config):
    result = CliRunner().invoke(
        main, ["flows", "list", "--json", "--config", str(scheduled_config)]
    )
    assert result.exit_code == 0, result.output
    plans = {p["name"]: p for p in map(json.loads, result.stdout.splitlines())}
    assert set(plans) == {"index_corpus", "annotate", "reindex"}
    runs = [datetime.fromisoformat(t) for t in plans["index_corpus"]["next_runs"]]
    assert len(runs) == 3 and all(t.minute % 15 == 0 for t in runs)
    assert runs[0] > datetime.now(timezone.utc) and runs[1] - runs[0] == runs[2] - runs[1]
    assert plans["annotate"]["skipped"] is None and len(plans["annotate"]["next_runs"]) == 3
    assert plans["reindex"]["next_runs"] == []


def test_scheduled_index_flow_indexes_sources(prefect_api, scheduled_config, small_corpus):
    from flows.schedules import index_sources

    config = load_config(scheduled_config)
    out = index_sources(str(scheduled_config), config.store.path)
    assert out["docs"]["encoded"] == 5
    rows = small_corpus.read_text().splitlines()
    small_corpus.write_text("\n".join(rows[1:]) + "\n")  # a1 gone from the source
    out = index_sources(str(scheduled_config), config.store.path, ["docs"])
    assert (out["docs"]["encoded"], out["docs"]["deleted"]) == (0, 1)  # on_missing: delete


def test_delete_and_status_cli(tmp_path, tiny_model_dir, small_corpus):
    config = write_config(tmp_path / "config.yaml", tiny_model_dir, tmp_path / "store")
    cfg = load_config(config)
    runner = CliRunner()
    empty = runner.invoke(main, ["status", "--config", str(config), "--json"])
    assert empty.exit_code == 1 and "no store" in empty.stderr
    run_index([str(small_corpus)], cfg, collection="news")
    from indexer.store import Store

    with Store(cfg.store.path) as store:
        for doc_id in store.reads.document_hashes():  # a1 first: doc ids follow reading order
            store.con.execute(
                "INSERT INTO annotations (doc_id, head, head_version, label, probability) "
                "VALUES (?, 'topic', 'h1', 'x', 0.5)",
                [doc_id],
            )
    result = runner.invoke(
        main,
        [
            "delete",
            "--id",
            "a1",
            "--id",
            "zz",
            "--collection",
            "news",
            "--config",
            str(config),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["deleted"], out["not_found"], out["chunks_removed"]) == (["a1"], ["zz"], 1)
    assert runner.invoke(main, ["delete", "--config", str(config)]).exit_code == 2
    hits = [h[0] for q in results(cfg) for h in q]
    assert "a1" not in hits and check_store(cfg).problems == []
    result = runner.invoke(main, ["status", "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.stdout)
    assert info["collections"] == [
        {
            "collection": "news",
            "documents": 4,
            "chunks": info["index"]["ntotal"],
            "vectors": info["index"]["ntotal"],
        }
    ]
    assert info["index"]["version"] == "v2" and info["index"]["provenance"]["pooling"] == "mean"
    assert info["annotations"] == {"topic": 4} and not info["writer_active"]  # a1's went too
    assert [r["kind"] for r in info["runs"]] == ["delete", "index"]
    assert all(r["status"] == "completed" for r in info["runs"])
    table = runner.invoke(main, ["status", "--config", str(config)])
    assert table.exit_code == 0 and "news" in table.stdout


@pytest.mark.parametrize(
    "schedules, message",
    [
        ({"reindex": {}}, "exactly one of 'cron'"),
        ({"reindex": {"cron": "* * *"}}, "5 fields"),
        ({"reindex": {"cron": "61 * * * *"}}, "not valid"),
        ({"reindex": {"interval": 60, "every": 3}}, "unknown key 'schedules.reindex.every'"),
        ({"nightly": {"interval": 60}}, "schedules.nightly"),
        ({"index_corpus": {"interval": 60}}, "needs at least one entry under 'sources:'"),
    ],
)
def test_schedule_config_errors_name_the_key(tmp_path, schedules, message):
    from indexer.errors import ConfigError

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"schedules": schedules}))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_index_and_annotate_flows_keep_dedup_and_the_report_current(
    prefect_api, tiny_config, tmp_path
):
    """Once a collection is grouped, the index flow places new documents (incrementally) and
    the annotate flow brings the groups up to date and writes the scheduled report."""
    from flows.annotate import after_annotate
    from indexer.dedup.groups import run_dedup
    from indexer.store import Store

    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"id": f"w{i}", "text": "the cat sat on the mat", "t": f"2024-01-0{i + 1}"})
            + "\n"
            for i in range(3)
        )
    )
    config = tiny_config.with_overrides(**{"dedup.min_size": 2})
    flow_for(config)([str(corpus)], config, "c")
    run_dedup(config, "c", threshold=0.99)
    corpus.write_text(
        corpus.read_text()
        + json.dumps({"id": "w9", "text": "the cat sat on the mat", "t": "2024-01-09"})
        + "\n"
    )
    summary = flow_for(config)([str(corpus)], config, "c")
    assert summary["dedup"]["c"]["mode"] == "incremental"
    assert summary["dedup"]["c"]["searched"] == 1
    with Store(config.store.path, read_only=True, snapshot=False) as store:
        assert store.dedup.group_counts("c", 2) == (1, 4)
    data = config.model_dump()
    data["fields"]["time"] = "t"
    data["schedules"] = {"report": {"folder": str(tmp_path / "reports")}}
    from indexer.config import Config

    out = after_annotate(Config.model_validate(data), stored=True)
    assert out["dedup"]["c"]["searched"] == 0 and out["report"]["buckets"] == 2
    assert (tmp_path / "reports" / "report.html").is_file()
