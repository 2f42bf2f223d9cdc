"""`train classifier|ner` and `eval head` through click: exit codes and --json output."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from search.cli.heads import eval_head, train


@pytest.fixture(scope="module")
def cli() -> click.Group:
    group = click.Group(name="bertindex")
    group.add_command(train)
    evaluate = click.Group(name="eval")
    evaluate.add_command(eval_head, name="head")
    group.add_command(evaluate)
    return group


def test_every_command_has_help(cli):
    for name, command in [("train", train), ("classifier", train.commands["classifier"]),
                          ("ner", train.commands["ner"]), ("head", eval_head)]:
        assert command.help, name
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{name} {param.name}"


def test_train_then_eval_json(cli, tiny_bert, classifier_json, tmp_path):
    runner = CliRunner()
    out = tmp_path / "head"
    result = runner.invoke(cli, ["train", "classifier", "--data", str(classifier_json), "--out", str(out),
                                 "--base", str(tiny_bert), "--epochs", "1", "--batch-size", "4", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["best_epoch"] == 1
    assert set(summary["validation"]) == {"macro_f1"} and set(summary["test"]) == {"macro_f1"}
    assert set(summary["baseline"]["test"]) == {"macro_f1"}
    result = runner.invoke(cli, ["eval", "head", str(out), "--data", str(classifier_json), "--json"])
    assert result.exit_code == 0, result.output
    scores = json.loads(result.stdout)
    assert scores["metric"] == "macro_f1" and scores["split"] == "test"
    assert scores["macro_f1"] == pytest.approx(summary["test"]["macro_f1"])
    assert set(scores["per_class"]["pos"]) == {"precision", "recall", "f1", "support"}
    result = runner.invoke(cli, ["eval", "head", str(out), "--data", str(classifier_json), "--split", "validation"])
    assert result.exit_code == 0 and "macro_f1" in result.stdout


def test_exit_codes(cli, tiny_bert, classifier_json, tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["train", "classifier", "--data", str(classifier_json)])
    assert result.exit_code == 2 and "--out" in result.output  # usage
    result = runner.invoke(cli, ["train", "classifier", "--data", str(classifier_json), "--out",
                                 str(tmp_path / "o"), "--max-length", "3"])
    assert result.exit_code == 2  # --max-length below 8
    result = runner.invoke(cli, ["train", "ner", "--data", str(classifier_json), "--out", str(tmp_path / "o"),
                                 "--base", str(tiny_bert)])
    assert result.exit_code == 1 and "error:" in result.stderr  # sentence items given to ner
    result = runner.invoke(cli, ["eval", "head", str(tmp_path), "--data", str(classifier_json)])
    assert result.exit_code == 1 and "not a saved head" in result.stderr
