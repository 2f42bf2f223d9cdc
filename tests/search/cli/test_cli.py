"""The `bertindex` CLI: help everywhere, JSON output, filters and exit codes.

One Prefect flow run (the `index` command) per session, under Prefect's test harness.
"""

import json
import subprocess
import sys

import click
import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from testkit import write_vectors

from indexer.config import Config
from indexer.encode.encoder import load_encoder
from indexer.query.hits import HIT_FIELDS
from indexer.store import Store
from search.cli.main import main

pytestmark = pytest.mark.heavy


def all_commands(group: click.Group, prefix=()):
    for name, cmd in group.commands.items():
        yield (*prefix, name), cmd
        if isinstance(cmd, click.Group):
            yield from all_commands(cmd, (*prefix, name))


def test_every_command_has_help_text():
    runner = CliRunner()
    for path, cmd in all_commands(main):
        assert cmd.help, f"{' '.join(path)} has no help text"
        result = runner.invoke(main, [*path, "--help"])
        assert result.exit_code == 0, path
        assert "Usage:" in result.output


def write_config(root, tiny_model_dir):
    config = root / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "name": str(tiny_model_dir),
                    "dtype": "fp32",
                    "device": "cpu",
                    "max_length": 32,
                },
                "long_documents": {"stride": 8},
                "store": {"path": str(root / "store")},
            }
        )
    )
    return config


@pytest.fixture(scope="module")
def cli_store(tmp_path_factory, tiny_model_dir, prefect_api):
    """A store built by `bertindex index` (the Prefect flow) on a small JSONL corpus."""
    root = tmp_path_factory.mktemp("cli")
    config = write_config(root, tiny_model_dir)
    corpus = root / "docs.jsonl"
    rows = [
        {"id": "p1", "text": "the cat sat on the mat", "topic": "pets"},
        {"id": "p2", "text": "the dog slept on the sofa", "topic": "pets"},
        {"id": "c1", "text": "parse command line arguments in python", "topic": "code"},
        {"id": "c2", "text": "", "topic": "code"},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = CliRunner().invoke(main, ["index", str(corpus), "--config", str(config), "--json"])
    assert result.exit_code == 0, result.output
    return config, json.loads(result.stdout)


def test_index_strict_exits_1_and_stores_only_clean_batches(tmp_path, tiny_model_dir, prefect_api):
    config = write_config(tmp_path, tiny_model_dir)
    corpus = tmp_path / "docs.jsonl"
    rows = [
        {"id": "a1", "text": "the cat sat"},
        {"id": "a2", "text": "the dog slept"},
        {"id": "b1", "text": "red apple"},
        {"id": "b2", "text": "   "},
    ]  # b2: empty text
    corpus.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["index", str(corpus), "--config", str(config), "--batch-size", "2", "--json"]
    result = CliRunner().invoke(main, [*args, "--strict"])
    assert result.exit_code == 1, result.output
    summary = json.loads(result.stdout)
    assert [r["rejected"] for r in summary["refused_batches"]] == [1]
    assert "error: --strict: batch" in result.stderr and "docs.jsonl rows 3-4" in result.stderr
    with Store(tmp_path / "store", read_only=True) as store:
        assert sorted(store.documents.existing("default", ["a1", "a2", "b1", "b2"])) == ["a1", "a2"]
    # the same file without --strict stores the clean record of the second batch, exit 0
    again = CliRunner().invoke(main, args[:-1])  # the text summary, with where the time went
    assert again.exit_code == 0, again.output
    assert "seconds: wall " in again.stdout and "commit " in again.stdout
    with Store(tmp_path / "store", read_only=True) as store:
        assert sorted(store.documents.existing("default", ["a1", "a2", "b1", "b2"])) == [
            "a1",
            "a2",
            "b1",
        ]


def test_index_summary(cli_store):
    _, summary = cli_store
    assert {k: summary[k] for k in ("read", "encoded", "skipped_unchanged", "rejected")} == {
        "read": 4,
        "encoded": 3,
        "skipped_unchanged": 0,
        "rejected": 1,
    }
    assert summary["rejections"][0]["row"] == 4
    stages = summary["stages"]  # seconds per stage, the flow's run included
    assert stages["wall"] >= max(stages.values()) and stages["encode"] > 0


def test_search_json_and_where(cli_store):
    config, _ = cli_store
    runner = CliRunner()
    result = runner.invoke(
        main, ["search", "the cat sat on the mat", "--config", str(config), "--json", "-k", "2"]
    )
    assert result.exit_code == 0, result.output
    hits = [json.loads(line) for line in result.stdout.splitlines()]
    assert hits[0]["id"] == "p1" and hits[0]["rank"] == 1
    # `SearchHit.to_dict`, as POST /search answers, then the document's labels and entities
    assert list(hits[0]) == [*HIT_FIELDS, "labels", "entities"]
    result = runner.invoke(
        main,
        [
            "search",
            "the cat sat on the mat",
            "--config",
            str(config),
            "--json",
            "--where",
            "topic=code",
        ],
    )
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["c1"]
    table = runner.invoke(main, ["search", "cat", "--config", str(config)])
    assert table.exit_code == 0 and "rank" in table.stdout


def test_no_hits_is_success(cli_store):
    config, _ = cli_store
    result = CliRunner().invoke(
        main,
        [
            "search",
            "cat",
            "--config",
            str(config),
            "--json",
            "--where",
            "topic=x'; DROP TABLE documents; --",
        ],
    )
    assert result.exit_code == 0 and result.stdout == ""


def test_exit_codes(cli_store, tmp_path):
    config, _ = cli_store
    runner = CliRunner()
    assert runner.invoke(main, ["search"]).exit_code == 2
    assert (
        runner.invoke(
            main, ["search", "cat", "--where", "novalue", "--config", str(config)]
        ).exit_code
        == 2
    )
    assert runner.invoke(main, ["search", "cat", "--bogus"]).exit_code == 2
    missing = runner.invoke(
        main, ["search", "cat", "--config", str(config), "--store", str(tmp_path / "none")]
    )
    assert missing.exit_code == 1 and "no store" in missing.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  nmae: x\n")
    result = runner.invoke(main, ["search", "cat", "--config", str(bad)])
    assert result.exit_code == 1 and "unknown key 'model.nmae'" in result.stderr


def test_the_console_script_answers_in_full_then_exits_at_once(cli_store, tmp_path):
    """`bertindex` runs `search.cli.main:run`: a local search's whole answer reaches a pipe
    before the process ends without its teardown; errors keep their exit codes."""
    from importlib.metadata import entry_points

    [script] = [e for e in entry_points(group="console_scripts") if e.name == "bertindex"]
    assert script.value == "search.cli.main:run"
    config, _ = cli_store
    command = [sys.executable, "-m", "search.cli.main", "search"]
    done = subprocess.run(
        [*command, "the cat sat on the mat", "--config", str(config), "--json", "-k", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    inline = CliRunner().invoke(
        main, ["search", "the cat sat on the mat", "--config", str(config), "--json", "-k", "3"]
    )
    assert [json.loads(line)["id"] for line in done.stdout.splitlines()] == [
        json.loads(line)["id"] for line in inline.stdout.splitlines()
    ]
    assert len(done.stdout.splitlines()) == 3
    missing = subprocess.run(
        [*command, "cat", "--config", str(config), "--store", str(tmp_path / "none")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 1 and "no store" in missing.stderr


def test_a_search_imports_neither_duckdb_nor_pyarrow_compute_nor_dataset(cli_store):
    """Each costs a cold `bertindex search` ~30-70 ms of imports (at 10M its whole budget is
    ~1 s): hits are read from row packs by slices, tombstones with `ParquetFile`, and `meta`
    and which tables have rows from the snapshot's manifest."""
    config, _ = cli_store
    code = (
        "import sys; from search.cli.main import main\n"
        "try: main(sys.argv[1:])\n"
        "except SystemExit as exc: assert not exc.code, exc.code\n"
        "print(sorted(m for m in ('duckdb', 'pyarrow.compute', 'pyarrow.dataset') "
        "if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "search", "the cat sat", "--config", str(config), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert '"id": "p1"' in done.stdout and done.stdout.splitlines()[-1] == "[]"


def test_index_vectors_imports_and_names_a_bad_file(tmp_path, tiny_model_dir, prefect_api):
    """`index --vectors`: the documents the file names are stored with its vectors (the JSON
    summary counts them); a file of another dimension exits 1 naming the file."""
    config = write_config(tmp_path, tiny_model_dir)
    cfg = Config().with_overrides(
        **{"model.name": str(tiny_model_dir), "model.dtype": "fp32", "model.device": "cpu"}
    )
    encoder = load_encoder(cfg.model)
    model, dim = encoder.provenance.model_name, encoder.dim
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text('{"id": "a", "text": "the cat"}\n{"id": "b", "text": "the dog"}\n')
    vectors = np.eye(2, dim, dtype=np.float32)
    good = write_vectors(tmp_path / "v.npz", ["a", "b"], vectors, model)
    args = ["index", str(corpus), "--config", str(config), "--json", "--vectors"]
    result = CliRunner().invoke(main, [*args, str(good)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["vectors"]["imported"] == 2
    wide = write_vectors(tmp_path / "w.npz", ["a", "b"], np.eye(2, dim + 1), model)
    result = CliRunner().invoke(main, [*args, str(wide)])
    assert result.exit_code == 1
    assert f"{wide}: vectors of {dim + 1} floats" in result.stderr
