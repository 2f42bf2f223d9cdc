"""Training length and steps: the lr schedule's shape, `--epochs auto` (stops when validation
stalls, keeps the best state), `--max-length auto`, the per-epoch lines a log reads, and the
warning when a head does not beat its baseline."""

from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest
import torch

from indexer.errors import InputError
from indexer.heads.data import HeadData, read_head_data
from indexer.heads.evaluate import evaluate_head
from indexer.heads.features import Encoded
from indexer.heads.receipt import baseline_warning
from indexer.heads.schedule import EpochRule, auto_max_length
from indexer.heads.selection import progressed
from indexer.heads.train import FitResult, Stage, TrainSettings, train_epochs, train_head
from indexer.training.schedule import Schedule, plan_schedule, warmup_then_decay

# ---- the schedule ---------------------------------------------------------------------------


def test_warmup_then_linear_decay_values():
    assert [warmup_then_decay(s, 10, 100) for s in (0, 4, 9)] == [0.1, 0.5, 1.0]
    assert warmup_then_decay(10, 10, 100) == 1.0  # the peak, then down a straight line
    assert warmup_then_decay(55, 10, 100) == pytest.approx(0.5)
    assert warmup_then_decay(99, 10, 100) == pytest.approx(1 / 90)
    assert warmup_then_decay(100, 10, 100) == 0.0 and warmup_then_decay(150, 10, 100) == 0.0
    curve = [warmup_then_decay(s, 10, 100) for s in range(100)]
    assert curve.index(max(curve)) == 9  # rises to the top at the end of warm-up
    assert all(a < b for a, b in itertools.pairwise(curve[:10]))
    assert all(a > b for a, b in itertools.pairwise(curve[10:]))


def test_schedule_horizon():
    assert plan_schedule(50, 2, 0.1) == Schedule(10, 100)  # the seeds' recipe: 10 % of 2 epochs
    auto = plan_schedule(50, 20, 0.06)  # --epochs auto: 6 % of the --max-epochs horizon
    assert auto == Schedule(60, 1000) and auto.multiplier(59) == 1.0


def test_the_optimizer_follows_the_schedule(tiny_bert, classifier_json, tmp_path):
    """The lr at each epoch's end, as the receipt records it, is the schedule's value."""
    data = read_head_data(
        "classifier", classifier_json, fmt="splits"
    )  # 12 train examples, 4 a step: 3 steps
    fixed = train_head(
        data,
        TrainSettings("classifier", tiny_bert, tmp_path / "a", epochs=2, batch_size=4, lr=1e-3),
    )
    assert [e["lr_end"] for e in fixed["epochs"]] == pytest.approx([1e-3 * 3 / 6, 0.0])
    auto = train_head(
        data,
        TrainSettings(
            "classifier", tiny_bert, tmp_path / "b", batch_size=4, lr=1e-3, max_epochs=5, patience=5
        ),
    )
    # horizon 5 epochs x 3 steps = 15, warm-up int(0.06 * 15) = 0 steps
    assert [e["lr_end"] for e in auto["epochs"]] == pytest.approx(
        [1e-3 * (15 - 3 * k) / 15 for k in range(1, 6)]
    )
    assert auto["stopped"]["reason"] == "max_epochs" and auto["epochs_run"] == 5
    assert "decay to 0 at step 15" in auto["recipe"]["schedule"]


# ---- --epochs auto ----------------------------------------------------------------------------


def test_epoch_rule():
    rule = EpochRule(20, patience=2)
    assert [rule.stop_after(e, 1) for e in (1, 2, 3)] == [None, None, "patience"]
    assert rule.stop_after(20, 19) == "max_epochs" and rule.stop_after(5, 5) is None
    assert rule.remaining(3, 2) == (1, 17)
    fixed = EpochRule(2)
    assert fixed.stop_after(1, 0) is None and fixed.stop_after(2, 1) == "epochs"
    assert fixed.remaining(1, 1) == (1, 1)


def test_a_plateau_with_falling_validation_loss_is_progress_under_auto_epochs():
    from indexer.heads.selection import better

    assert better(0.5, 0.9, 0.4, 0.1, ties=False)  # a higher score always wins
    assert better(0.4, 0.5, 0.4, 0.6, ties=True)  # same score, lower loss: auto epochs go on
    assert not better(0.4, 0.5, 0.4, 0.6, ties=False)  # a fixed --epochs keeps the seeds' rule
    assert not better(0.4, 0.59995, 0.4, 0.6, ties=True)  # within 0.1 %: no gain
    assert not better(0.3, 0.1, 0.4, 0.6, ties=True)


def test_only_a_rise_of_min_delta_resets_patience():
    assert progressed(0.902, 0.5, 0.900, 0.5)  # + MIN_DELTA
    assert not progressed(0.9015, 0.1, 0.900, 0.5)  # a creep: kept as best, but no more patience
    assert progressed(0.40, 0.49, 0.40, 0.5)  # the plateau rule: same score, loss 2 % lower
    assert not progressed(0.40, 0.4999, 0.40, 0.5)
    assert progressed(0.0, 9.0, float("-inf"), float("inf"))  # the first epoch


def test_auto_epochs_stop_when_validation_stalls_and_keep_the_best_state(tiny_bert):
    """A toy model whose validation predictions are scripted per epoch (good, best, then
    worse twice): training stops after epoch 4 and the model holds its epoch-2 weights (the
    mean of epochs 2-4, scored after, does not beat them)."""
    result, model, snapshots = _scripted_run(
        tiny_bert,
        lambda g: [
            _predictions(g, 4),
            _predictions(g, 8),
            _predictions(g, 0),
            _predictions(g, 0),
            _predictions(g, 8),
        ],
    )
    assert [e["validation"]["macro_f1"] for e in result.history] == pytest.approx(
        [0.5, 1.0, 0.0, 0.0]
    )
    assert all(e["validation_loss"] > 0 for e in result.history)
    assert (result.epochs_run, result.best_epoch, result.stop_reason) == (4, 2, "patience")
    assert "not improved by 0.002 since epoch 2 (2 epochs); keeping epoch 2" in result.stop_message
    assert not torch.equal(snapshots[1]["weight"], snapshots[3]["weight"])  # it did move on
    assert result.average["kept"] is False
    for key, value in model.state_dict().items():
        assert torch.equal(value, snapshots[1][key])  # and came back to epoch 2


def _scripted_run(tiny_bert, script, epochs="auto", max_epochs=20):
    """`train_epochs` on a linear toy model whose validation logits follow `script`, one
    entry per validation pass; returns (result, model, the weights at each pass)."""
    from indexer.heads.classifier.head_type import SentenceExample

    examples = [SentenceExample(str(i), "x", i % 2) for i in range(8)]
    data = HeadData("classifier", ["neg", "pos"], {"train": examples, "validation": examples})
    val = Encoded([e.id for e in examples], [[2, 3]] * 8, [e.label for e in examples])
    gold = torch.tensor([e.label for e in examples])
    model = torch.nn.Linear(4, 2)
    x = torch.randn(8, 4)
    snapshots = []

    def step_loss(index):
        return torch.nn.functional.cross_entropy(model(x[index]), gold[index])

    def val_logits():
        snapshots.append({k: v.clone() for k, v in model.state_dict().items()})
        return list(script(gold)[len(snapshots) - 1])

    settings = TrainSettings(
        "classifier",
        tiny_bert,
        tiny_bert / "unused",
        batch_size=2,
        lr=0.1,
        epochs=epochs,
        max_epochs=max_epochs,
    )
    result = FitResult()
    stage = Stage(
        model,
        [model],
        step_loss,
        val_logits,
        np.ones(8, dtype=np.int64),
        rule=settings.epoch_rule,
        lr=0.1,
    )
    train_epochs(stage, data, val, settings, np.random.default_rng(0), result, "off")
    return result, model, snapshots


def _predictions(gold, right_count):
    """Logits getting the first `right_count` of the examples right."""
    right = torch.nn.functional.one_hot(gold, 2).float()
    wrong = torch.nn.functional.one_hot(1 - gold, 2).float()
    return torch.cat([right[:right_count], wrong[right_count:]])


def test_the_mean_of_the_tail_is_kept_when_it_scores_higher(tiny_bert):
    """Auto epochs: after stopping, the mean of the weights from the best epoch (2) to the
    last (4) is scored once more on validation; scoring higher than epoch 2, it is kept."""
    result, model, snapshots = _scripted_run(
        tiny_bert,
        lambda g: [
            _predictions(g, 4),
            _predictions(g, 6),
            _predictions(g, 4),
            _predictions(g, 4),
            _predictions(g, 8),
        ],
    )
    assert (result.epochs_run, result.best_epoch, result.stop_reason) == (4, 2, "patience")
    assert len(snapshots) == 5  # four epochs, then the mean
    # from epoch 2 on and from the best epoch (2) on are the same run here: tried once
    assert result.average == {
        "epochs": [2, 3, 4],
        "validation": 1.0,
        "kept": True,
        "tried": [{"epochs": [2, 3, 4], "validation": 1.0}],
    }
    for key, value in model.state_dict().items():
        mean = sum(snapshots[i][key] for i in (1, 2, 3)) / 3
        assert torch.allclose(value, mean, atol=1e-6)


def test_the_better_of_two_means_is_kept(tiny_bert):
    """Best epoch 3, stop after 5: the means of epochs 2-5 and of 3-5 are both scored and the
    one scoring higher on validation (2-5 here) is kept."""
    result, model, snapshots = _scripted_run(
        tiny_bert,
        lambda g: [
            _predictions(g, 4),
            _predictions(g, 4),
            _predictions(g, 6),
            _predictions(g, 4),
            _predictions(g, 4),
            _predictions(g, 8),
            _predictions(g, 6),
        ],
    )
    assert (result.epochs_run, result.best_epoch) == (5, 3)
    assert result.average["tried"] == [
        {"epochs": [2, 3, 4, 5], "validation": 1.0},
        {"epochs": [3, 4, 5], "validation": 0.75},
    ]
    assert result.average["epochs"] == [2, 3, 4, 5] and result.average["kept"]
    for key, value in model.state_dict().items():
        mean = sum(snapshots[i][key] for i in (1, 2, 3, 4)) / 4
        assert torch.allclose(value, mean, atol=1e-6)


def test_the_best_epoch_stays_when_the_mean_does_not_beat_it_and_fixed_epochs_never_average(
    tiny_bert,
):
    result, model, snapshots = _scripted_run(
        tiny_bert,
        lambda g: [
            _predictions(g, 4),
            _predictions(g, 6),
            _predictions(g, 4),
            _predictions(g, 4),
            _predictions(g, 6),
        ],
    )
    assert {k: result.average[k] for k in ("epochs", "validation", "kept")} == {
        "epochs": [2, 3, 4],
        "validation": 0.75,
        "kept": False,
    }
    for key, value in model.state_dict().items():
        assert torch.equal(value, snapshots[1][key])  # epoch 2's own weights
    fixed, _, passes = _scripted_run(
        tiny_bert, lambda g: [_predictions(g, 6), _predictions(g, 4), _predictions(g, 4)], epochs=3
    )
    assert fixed.average is None and len(passes) == 3  # `--epochs 3`: the seeds' recipe


def test_the_last_epoch_stays_when_it_is_best_and_the_mean_scores_lower(tiny_bert):
    """Auto epochs stopped at --max-epochs with the last epoch best: the mean of epochs 2-3 is
    scored (its weights loaded), scores lower, and the last epoch's own weights come back."""
    result, model, snapshots = _scripted_run(
        tiny_bert,
        lambda g: [_predictions(g, 4), _predictions(g, 5), _predictions(g, 6), _predictions(g, 4)],
        max_epochs=3,
    )
    assert (result.epochs_run, result.best_epoch, result.stop_reason) == (3, 3, "max_epochs")
    assert result.average["epochs"] == [2, 3] and not result.average["kept"]
    for key, value in model.state_dict().items():
        assert torch.equal(value, snapshots[2][key])  # epoch 3's own weights, not the mean


def test_auto_epochs_end_to_end(tiny_bert, ner_conll, tmp_path):
    """The receipt holds the whole curve and why it stopped; the saved head scores what its
    best epoch scored (the best state is what is saved)."""
    train, dev = ner_conll
    data = read_head_data("ner", train, validation=dev)
    receipt = train_head(
        data, TrainSettings("ner", tiny_bert, tmp_path / "ner", lr=5e-3, max_epochs=6, patience=2)
    )
    curve = [e["validation"]["entity_f1"] for e in receipt["epochs"]]
    assert receipt["epochs_run"] == len(curve) <= 6
    best = receipt["best_epoch"]
    assert curve[best - 1] == max(curve)  # an equal score with a lower loss may come later
    losses = [e["validation_loss"] for e in receipt["epochs"]]
    assert all(
        losses[i] >= losses[best - 1] * (1 - 1e-3) for i, c in enumerate(curve) if c == max(curve)
    )
    assert receipt["best_validation"] == max(curve)
    average = receipt["average"]  # the mean of the tail, kept only when it scores higher
    kept = average["validation"] if average and average["kept"] else max(curve)
    assert kept >= max(curve) and receipt["validation"]["entity_f1"] == pytest.approx(kept)
    if receipt["stopped"]["reason"] == "patience":
        assert len(curve) - receipt["best_epoch"] == 2
    else:
        assert receipt["stopped"]["reason"] == "max_epochs" and len(curve) == 6
    assert receipt["recipe"]["epochs"] == "auto" and receipt["recipe"]["patience"] == 2
    assert receipt["recipe"]["batch_size"] == 8 and receipt["recipe"]["batch_size_rule"].startswith(
        "auto"
    )
    saved = evaluate_head(tmp_path / "ner", data, "validation")
    assert saved["entity_f1"] == pytest.approx(kept)


def test_a_stalled_run_stops_after_patience(tiny_bert, classifier_json, tmp_path):
    data = read_head_data("classifier", classifier_json, fmt="splits")
    receipt = train_head(
        data,
        TrainSettings("classifier", tiny_bert, tmp_path / "h", batch_size=4, lr=1e-12, patience=2),
    )  # nothing moves: epoch 1 is best
    assert receipt["epochs_run"] == 3 and receipt["best_epoch"] == 1
    assert receipt["stopped"]["reason"] == "patience"
    assert receipt["stopped"]["message"].startswith("stopped early after epoch 3")


# ---- progress a log can read -----------------------------------------------------------------


def test_per_epoch_lines_when_stderr_is_not_a_terminal(
    tiny_bert, classifier_json, tmp_path, capsys
):
    data = read_head_data("classifier", classifier_json, fmt="splits")
    train_head(
        data,
        TrainSettings("classifier", tiny_bert, tmp_path / "h", batch_size=4, lr=1e-12, patience=2),
        progress="lines",
    )
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert [line for line in lines if line.startswith("max length: ")] == [
        "max length: auto: 32, the longest example is 7 tokens (train train[8])"
    ]
    epoch = re.compile(
        r"^epoch (\d) \(max 20\): train loss \d+\.\d{4}, validation macro_f1 "
        r"\d\.\d{4}, best \d\.\d{4} \(epoch 1\), elapsed \d+:\d\d, (ETA \d+:\d\d|done)"
    )
    epochs = [line for line in lines if line.startswith("epoch ")]
    assert [epoch.match(line).group(1) for line in epochs] == ["1", "2", "3"], lines
    assert "if it stops at epoch 3, at most" in epochs[0]  # two more if no gain, 19 at most
    assert epochs[1].split("ETA ")[1].count(":") == 2 and epochs[2].endswith(", done")
    assert lines.index(epochs[-1]) + 1 == lines.index(
        "stopped early after epoch 3: validation macro_f1 has not improved by 0.002 since epoch 1 "
        f"(2 epochs); keeping epoch 1 ({epochs[0].split('macro_f1 ')[1][:6]})"
    )


def test_progress_lines_carry_rate_and_eta():
    import io

    from indexer.core.progress import Progress

    now = [0.0]
    out = io.StringIO()
    bar = Progress(
        1000, "annotating", "doc", "lines", every_s=10, stream=out, clock_fn=lambda: now[0]
    )
    for _ in range(10):
        now[0] += 4.0
        bar.update(50)  # 12.5 docs/s
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[:2] == [
        "annotating: 150/1,000 doc (15%), 12.5 doc/s, elapsed 0:12, ETA 1:08",
        "annotating: 300/1,000 doc (30%), 12.5 doc/s, elapsed 0:24, ETA 0:56",
    ]
    assert len(lines) == 4 and lines[-1] == "annotating: done, 500 doc in 0:40 (12.5 doc/s)"
    quiet = io.StringIO()
    short = Progress(10, "encoding", "seq", "lines", every_s=10, stream=quiet, clock_fn=lambda: 0.0)
    short.update(10)
    short.close()
    off = Progress(10, "encoding", "seq", "off", stream=quiet)
    off.update(10)
    off.close()
    assert quiet.getvalue() == ""  # a short job says nothing; off says nothing


def test_progress_mode_from_the_environment(monkeypatch):
    import io

    from indexer.core.progress import progress_mode

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("BERTINDEX_PROGRESS", raising=False)
    assert progress_mode(io.StringIO()) == "lines" and progress_mode(Tty()) == "bar"
    monkeypatch.setenv("BERTINDEX_PROGRESS", "0")
    assert progress_mode(Tty()) == "off"
    monkeypatch.setenv("BERTINDEX_PROGRESS", "lines")
    assert progress_mode(Tty()) == "lines"


# ---- --max-length auto -----------------------------------------------------------------------


def test_max_length_auto_fits_every_split():
    enc = {
        "train": Encoded(["a", "b"], [[1] * 40, [1] * 12], [0, 0]),
        "validation": Encoded(["c"], [[1] * 65], [0]),
        "test": Encoded(["d"], [[1] * 9], [0]),
    }
    assert auto_max_length(enc) == (96, "auto: 96, the longest example is 65 tokens (validation c)")
    enc["validation"] = Encoded(["c"], [[1] * 64], [0])
    assert auto_max_length(enc)[0] == 64
    enc["validation"] = Encoded(["c"], [[1] * 5], [0])
    assert auto_max_length(enc)[0] == 64  # train's 40 -> 64
    enc["test"] = Encoded(["long one"], [[1] * 600], [0])
    with pytest.raises(
        InputError, match=r"1 test example\(s\) are longer than --max-length 512.*long one"
    ):
        auto_max_length(enc)


def test_max_length_auto_in_a_run_and_a_given_number_still_refuses(tiny_bert, tmp_path):
    items = [
        {"text": "good " * n, "label": "pos" if n % 2 else "neg", "id": f"t{n}"}
        for n in (2, 9, 12, 3, 20, 30, 40, 50, 60)
    ]
    path = tmp_path / "long.json"
    path.write_text(json.dumps({"train": items, "validation": items[:4]}))
    data = read_head_data("classifier", path, fmt="splits")
    receipt = train_head(data, TrainSettings("classifier", tiny_bert, tmp_path / "h", epochs=1))
    assert receipt["recipe"]["max_length"] == 64  # 60 words + [CLS] [SEP] = 62 tokens
    assert (
        receipt["recipe"]["max_length_rule"]
        == "auto: 64, the longest example is 62 tokens (train t60)"
    )
    with pytest.raises(InputError, match=r"longer than --max-length 32 .* t40 \(42 tokens\)"):
        train_head(
            data, TrainSettings("classifier", tiny_bert, tmp_path / "g", epochs=1, max_length=32)
        )


# ---- the baseline warning ----------------------------------------------------------------------


def test_baseline_warning_names_both_figures_and_what_to_try():
    base = {"name": "tfidf", "validation": {"macro_f1": 0.607}}
    below = baseline_warning(
        "macro_f1", 0.553, base, 1000, {"auto_epochs": False, "head_only": False}
    )
    assert below["code"] == "below_baseline"
    assert below["message"] == (
        "the head's best validation macro_f1 0.5530 is below the tfidf "
        "baseline's 0.6070; try --epochs auto (train until validation stops "
        "improving), --head-only (a head on the frozen sentence vector), "
        "more labelled data"
    )
    near = baseline_warning("macro_f1", 0.62, base, 1000, {"auto_epochs": True, "head_only": True})
    assert near["code"] == "near_baseline" and near["noise"] == pytest.approx(0.0309, abs=1e-4)
    assert (
        "within the noise (±0.031) of the tfidf baseline's 0.6070; try more labelled data"
        in near["message"]
    )
    assert baseline_warning("macro_f1", 0.65, base, 1000, {}) is None  # clear of the noise
    assert baseline_warning("entity_f1", 0.1, None, 1000, {}) is None  # NER: no baseline


def test_a_head_below_its_baseline_is_warned_and_recorded(
    tiny_bert, classifier_json, tmp_path, caplog
):
    data = read_head_data("classifier", classifier_json, fmt="splits")
    receipt = train_head(
        data,
        TrainSettings("classifier", tiny_bert, tmp_path / "h", batch_size=4, epochs=1, lr=1e-12),
    )  # an untrained head
    head, base = receipt["validation"]["macro_f1"], receipt["baseline"]["validation"]["macro_f1"]
    assert head < base  # the toy baseline sees its validation items in train
    [warning] = receipt["warnings"]
    assert warning["head_validation"] == head and warning["baseline_validation"] == base
    assert f"{head:.4f}" in warning["message"] and f"{base:.4f}" in warning["message"]
    assert "--epochs auto" in warning["message"]
    assert warning["message"] in caplog.text
