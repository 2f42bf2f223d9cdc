"""The inbox on a schedule: `schedules.annotate` in config.yaml becomes a Prefect deployment of
`flows.annotate.annotate_scheduled` with the heads, inbox and collection as its parameters
(inspected without waiting for a run), its config errors name the key, and one scheduled run
indexes and annotates the inbox's files once.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import yaml
from click.testing import CliRunner

from indexer.config import load_config
from search.cli.main import main

pytestmark = pytest.mark.heavy


def _config(path, tiny_model_dir, store, schedules):
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
                "schedules": schedules,
            }
        )
    )
    return path


def test_flows_serve_registers_the_annotate_inbox_deployment(
    tmp_path, tiny_model_dir, monkeypatch, serve_flows
):
    (tmp_path / "heads").mkdir()
    config = _config(
        tmp_path / "config.yaml",
        tiny_model_dir,
        tmp_path / "store",
        {
            "annotate": {
                "cron": "*/5 * * * *",
                "heads": ["heads/clf", "tags=heads/ner"],
                "inbox": "drop",
                "collection": "tweets",
            }
        },
    )
    monkeypatch.chdir(tmp_path)  # relative heads and inbox resolve from here, once
    [deployment], _ = serve_flows(config)
    assert deployment.name == "annotate"
    assert deployment.entrypoint == "flows.annotate.annotate_scheduled"
    assert deployment.schedules[0].schedule.cron == "*/5 * * * *"
    assert deployment.parameters == {
        "config_path": str(config.resolve()),
        "store_path": str((tmp_path / "store").resolve()),
        "heads": [str(tmp_path / "heads" / "clf"), f"tags={tmp_path / 'heads' / 'ner'}"],
        "inbox": str(tmp_path / "drop"),
        "collection": "tweets",
    }

    listed = CliRunner().invoke(main, ["flows", "list", "--json", "--config", str(config)])
    assert listed.exit_code == 0, listed.output
    plan = json.loads(listed.stdout)
    assert plan["flow"] == "annotate_scheduled" and plan["skipped"] is None
    assert plan["parameters"]["inbox"] == str(tmp_path / "drop")
    assert len(plan["next_runs"]) == 3


@pytest.mark.parametrize(
    "schedules, message",
    [
        ({"annotate": {"interval": 60}}, "schedules.annotate needs 'heads:'"),
        ({"annotate": {"interval": 60, "heads": []}}, "schedules.annotate needs 'heads:'"),
        ({"reindex": {"interval": 60, "inbox": "drop"}}, "schedules.reindex.inbox: only annotate"),
        (
            {"annotate": {"interval": 60, "heads": ["h"], "folder": "x"}},
            "schedules.annotate.folder: only report takes folder",
        ),
    ],
)
def test_annotate_schedule_errors_name_the_key(tmp_path, schedules, message):
    from indexer.errors import ConfigError

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"schedules": schedules}))
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_scheduled_annotate_takes_each_inbox_file_once(
    tmp_path, tiny_model_dir, heads, prefect_api
):
    from flows.annotate import annotate_scheduled
    from flows.schedules import plan_deployments

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.jsonl").write_text(
        '{"id": "t1", "text": "the cat sat"}\n{"id": "t2", "text": "a dog on the rug"}\n'
    )
    config_path = _config(
        tmp_path / "config.yaml",
        tiny_model_dir,
        tmp_path / "store",
        {
            "annotate": {
                "interval": 300,
                "heads": [f"clf={heads['clf']}", f"ner={heads['ner']}"],
                "inbox": str(inbox),
                "collection": "tweets",
            }
        },
    )
    [plan] = plan_deployments(load_config(config_path), str(config_path), next_runs=2)
    assert plan.next_runs[1] - plan.next_runs[0] == timedelta(seconds=300)
    first = annotate_scheduled(**plan.parameters)  # what a scheduled run is given
    again = annotate_scheduled(**plan.parameters)
    assert (first["annotated"], first["collection"], first["shared_pass"]) == (2, "tweets", True)
    assert (again["annotated"], again["skipped_files"]) == (0, 1)
