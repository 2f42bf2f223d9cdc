"""`train classifier|ner` and `eval head` through click: exit codes and --json output."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from search.cli.heads import eval_head, train

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def cli() -> click.Group:
    group = click.Group(name="bertindex")
    group.add_command(train)
    evaluate = click.Group(name="eval")
    evaluate.add_command(eval_head, name="head")
    group.add_command(evaluate)
    return group


def test_every_command_has_help(cli):
    for name, command in [
        ("train", train),
        ("classifier", train.commands["classifier"]),
        ("ner", train.commands["ner"]),
        ("head", eval_head),
    ]:
        assert command.help, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.name}"


def test_train_then_eval_json(cli, tiny_bert, classifier_json, tmp_path):
    runner = CliRunner()
    out = tmp_path / "head"
    result = runner.invoke(
        cli,
        [
            "train",
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(out),
            "--base",
            str(tiny_bert),
            "--epochs",
            "1",
            "--batch-size",
            "4",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["best_epoch"] == 1
    assert set(summary["validation"]) == {"macro_f1"} and set(summary["test"]) == {"macro_f1"}
    assert set(summary["baseline"]["test"]) == {"macro_f1"}
    result = runner.invoke(
        cli,
        ["eval", "head", str(out), "--data", str(classifier_json), "--format", "splits", "--json"],
    )
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert scores["metric"] == "macro_f1" and scores["split"] == "test"
    assert scores["macro_f1"] == pytest.approx(summary["test"]["macro_f1"])
    assert set(scores["per_class"]["pos"]) == {"precision", "recall", "f1", "support"}
    result = runner.invoke(
        cli,
        [
            "eval",
            "head",
            str(out),
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--split",
            "validation",
        ],
    )
    assert result.exit_code == 0 and "macro_f1" in result.stdout


def test_exit_codes(cli, tiny_bert, classifier_json, tmp_path):
    runner = CliRunner()
    result = runner.invoke(
        cli, ["train", "classifier", "--data", str(classifier_json), "--format", "splits"]
    )
    assert result.exit_code == 2 and "--out" in result.output  # usage
    result = runner.invoke(
        cli,
        [
            "train",
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(tmp_path / "o"),
            "--max-length",
            "3",
        ],
    )
    assert result.exit_code == 2  # --max-length below 8
    result = runner.invoke(
        cli,
        [
            "train",
            "ner",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(tmp_path / "o"),
            "--base",
            str(tiny_bert),
        ],
    )
    assert result.exit_code == 1 and "error:" in result.stderr  # sentence items given to ner
    result = runner.invoke(
        cli, ["eval", "head", str(tmp_path), "--data", str(classifier_json), "--format", "splits"]
    )
    assert result.exit_code == 1 and "not a saved head" in result.stderr


_VOLATILE = {
    "created",
    "out",
    "training_seconds",
    "training_cpu_seconds",
    "examples_per_second",
    "feature_seconds",
    "versions",
}


def _stable(receipt: dict) -> dict:
    """A receipt without its clock readings, time stamp and output path."""
    out = {k: v for k, v in receipt.items() if k not in _VOLATILE}
    out["epochs"] = [
        {k: v for k, v in e.items() if not k.endswith("seconds")} for e in receipt["epochs"]
    ]
    return out


def test_cli_flow_and_library_train_the_same_head(cli, tiny_bert, ner_conll, tmp_path):
    """`bertindex train` (the `train_head` flow) runs the library's `train_head`: same receipt."""
    from indexer.heads.data import read_head_data
    from indexer.heads.receipt import RECEIPT
    from indexer.heads.train import TrainSettings, train_head

    train_file, dev = ner_conll
    config = tmp_path / "config.yaml"
    config.write_text("model:\n  dtype: fp32\n")
    result = CliRunner().invoke(
        cli,
        [
            "train",
            "ner",
            "--data",
            str(train_file),
            "--validation",
            str(dev),
            "--test",
            str(dev),
            "--out",
            str(tmp_path / "cli"),
            "--base",
            str(tiny_bert),
            "--epochs",
            "2",
            "--batch-size",
            "2",
            "--lr",
            "5e-3",
            "--config",
            str(config),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    by_cli = json.loads((tmp_path / "cli" / RECEIPT).read_text())

    data = read_head_data("ner", train_file, validation=dev, test=dev)
    by_library = train_head(
        data,
        TrainSettings(
            "ner", tiny_bert, tmp_path / "lib", epochs=2, batch_size=2, lr=5e-3, dtype="fp32"
        ),
    )
    assert _stable(by_cli) == _stable(json.loads(json.dumps(by_library)))
    assert by_cli["recipe"]["ner_decode"].startswith("bio") and "entity_counts" in by_cli


def test_train_defaults_write_epoch_lines_a_log_can_read(cli, tiny_bert, classifier_json, tmp_path):
    """No flags: --epochs auto and --max-length auto; stderr (not a terminal) gets one line per
    epoch and the stop line; --patience with a fixed --epochs is a usage error."""
    runner = CliRunner()
    out = tmp_path / "head"
    result = runner.invoke(
        cli,
        [
            "train",
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(out),
            "--base",
            str(tiny_bert),
            "--lr",
            "1e-12",
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["epochs_run"], summary["best_epoch"], summary["stopped"]) == (3, 1, "patience")
    assert summary["max_length"] == 32 and summary["batch_size"] == 8
    assert summary["warnings"] and "baseline" in summary["warnings"][0]
    epochs = [line for line in result.stderr.splitlines() if line.startswith("epoch ")]
    assert [line.split(":")[0] for line in epochs] == [f"epoch {i} (max 20)" for i in (1, 2, 3)]
    assert "stopped early after epoch 3" in result.stderr
    assert "max length: auto: 32" in result.stderr
    result = runner.invoke(
        cli,
        [
            "train",
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(out),
            "--base",
            str(tiny_bert),
            "--epochs",
            "2",
            "--patience",
            "3",
        ],
    )
    assert result.exit_code == 2 and "--epochs auto only" in result.output
    result = runner.invoke(
        cli,
        [
            "train",
            "classifier",
            "--data",
            str(classifier_json),
            "--format",
            "splits",
            "--out",
            str(out),
            "--epochs",
            "many",
        ],
    )
    assert result.exit_code == 2 and "'many' is not 'auto' or a whole number" in result.output
