"""`bertindex train classifier|ner|pair` (one command per registered head type), `bertindex
train rerank` (a pair head from a BEIR set's judgements) and `bertindex eval head`: fine-tune a head
on the encoder (Prefect flow `train_head`, in process, which runs `indexer.heads.train.train_head`)
and score a saved head.

Thin layer: options in, `indexer.heads`, `indexer.reranker` (`train_reranker`) and
`flows.train` do the work.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import get_args

import click

from indexer.core.choices import Decode, EvalInput, HeadPooling
from indexer.heads.data import SPLITS
from indexer.heads.registry import HEAD_TYPE_NAMES, capabilities, head_type
from indexer.ingest.formats import labelled_format_names
from indexer.reranker.pairs import DEFAULT_NEGATIVES, MINE_DEPTH
from search.cli.common import (
    build_config,
    config_options,
    handle_errors,
    json_option,
    print_json,
    show_progress,
)

# one list each, derived (`indexer.ingest.formats`, `indexer.core.choices`)
FORMAT_CHOICES = list(labelled_format_names())
POOLING_CHOICES = list(get_args(HeadPooling))
DECODE_CHOICES = list(get_args(Decode))
INPUT_CHOICES = list(get_args(EvalInput))


class AutoOrInt(click.ParamType):
    """`auto` or a whole number in [low, high]."""

    name = "auto|integer"

    def __init__(self, low: int, high: int):
        self.low, self.high = low, high

    def convert(self, value, param, ctx):
        if value == "auto" or isinstance(value, int):
            number = value
        else:
            try:
                number = int(value)
            except ValueError:
                self.fail(f"{value!r} is not 'auto' or a whole number", param, ctx)
        if number != "auto" and not self.low <= number <= self.high:
            self.fail(
                f"{number} is not 'auto' or in the range {self.low}<=x<={self.high}", param, ctx
            )
        return number


def data_options(func: Callable) -> Callable:
    """--data PATH [--validation PATH] [--test PATH] [--format ...]."""
    for decorator in reversed(
        [
            click.option(
                "--data",
                required=True,
                type=click.Path(exists=True),
                help="A file holding the splits (JSON), the train split file, or a TweetEval "
                "folder.",
            ),
            click.option(
                "--validation",
                type=click.Path(exists=True, dir_okay=False),
                help="Validation split file (picks the best epoch).",
            ),
            click.option(
                "--test",
                type=click.Path(exists=True, dir_okay=False),
                help="Test split file (scored at the end, never used to pick the epoch).",
            ),
            click.option(
                "--format",
                "fmt",
                type=click.Choice(FORMAT_CHOICES),
                default="auto",
                show_default=True,
                help="Input format; auto guesses from each path.",
            ),
        ]
    ):
        func = decorator(func)
    return func


def train_options(func: Callable) -> Callable:
    """Options shared by `train classifier` and `train ner`."""
    for decorator in reversed(
        [
            click.option(
                "--out",
                required=True,
                type=click.Path(file_okay=False),
                help="Directory for the trained head (a standard transformers model dir).",
            ),
            click.option(
                "--base", help="Base encoder directory (default: the configured model.name)."
            ),
            click.option(
                "--head-only",
                is_flag=True,
                help="Freeze the backbone and train only the head (features computed once).",
            ),
            click.option(
                "--epochs",
                type=AutoOrInt(1, 100),
                default="auto",
                show_default=True,
                help="auto: train until validation stops improving for --patience epochs (at "
                "most --max-epochs); a number: exactly that many (--epochs 2 is the "
                "seeds' recipe). The best epoch on validation is kept.",
            ),
            click.option(
                "--patience",
                type=click.IntRange(1, 100),
                help="--epochs auto: stop after this many epochs without a better validation "
                "score (default 2).",
            ),
            click.option(
                "--max-epochs",
                type=click.IntRange(1, 100),
                help="--epochs auto: at most this many epochs (default 20).",
            ),
            click.option(
                "--probe-epochs",
                type=click.IntRange(0, 100),
                default=0,
                show_default=True,
                help="Full fine-tune only: first train the head alone on frozen features for "
                "this many epochs (LP-FT), then fine-tune everything from it.",
            ),
            click.option(
                "--lr",
                type=click.FloatRange(0, 1, min_open=True),
                help="Learning rate (default 5e-5 with --epochs auto, the seeds' 2e-5 with a fixed "
                "--epochs; 1e-3 with --head-only).",
            ),
            click.option(
                "--max-length",
                type=AutoOrInt(8, 512),
                default="auto",
                show_default=True,
                help="Longest example in tokens. auto: the smallest multiple of 32 that fits "
                "every example of every split; a number refuses longer ones (nothing "
                "is ever truncated).",
            ),
            click.option(
                "--batch-size",
                type=click.IntRange(1, 4096),
                help="Examples per training step. Default with --epochs auto: by data size "
                "(8 for a few thousand examples, up to 32, 8 for ner); with a fixed "
                "--epochs: 32, 8 for ner.",
            ),
            click.option("--seed", type=int, default=42, show_default=True, help="Random seed."),
            click.option(
                "--pooling",
                type=click.Choice(POOLING_CHOICES),
                default="auto",
                show_default=True,
                help="Classifier input: [CLS] -> pooler (what transformers' pipeline "
                "computes), or the L2-normalised token mean (kept in config.json; "
                "bertindex's loaders apply it). auto: mean with --head-only, else cls.",
            ),
        ]
    ):
        func = decorator(func)
    return func


@click.group(name="train")
def train() -> None:
    """Fine-tune a head on the encoder: a sentence classifier, a BIO NER tagger, or a
    sentence-pair cross-encoder (a reranker)."""


def _train(
    task: str,
    *,
    data,
    validation,
    test,
    fmt,
    out,
    base,
    head_only,
    epochs,
    patience,
    max_epochs,
    probe_epochs,
    lr,
    max_length,
    batch_size,
    seed,
    pooling,
    as_json,
    config_path,
    store_path,
    reviewed=None,
    blend="base",
) -> None:
    from flows.runtime import wait_for_api, warm_up_api

    warm_up_api()  # the Prefect API starts while torch and the model load
    from indexer.config import resolve_model_path
    from indexer.encode.policy import resolve_dtype
    from indexer.heads.receipt import summary
    from indexer.heads.train import TrainSettings

    if epochs != "auto" and (patience is not None or max_epochs is not None):
        raise click.UsageError("--patience and --max-epochs apply to --epochs auto only")
    stop = {k: v for k, v in (("patience", patience), ("max_epochs", max_epochs)) if v is not None}
    cfg = build_config(config_path, store_path)
    settings = TrainSettings(
        task=task,
        base=resolve_model_path(base or cfg.model.name),
        out=Path(out),
        head_only=head_only,
        epochs=epochs,
        probe_epochs=probe_epochs,
        lr=lr,
        max_length=max_length,
        batch_size=batch_size,
        seed=seed,
        dtype=resolve_dtype(cfg.model.dtype),
        pooling=pooling,
        blend=blend,
        **stop,
    )
    from flows.train import train_head

    wait_for_api()
    receipt = train_head(
        settings,
        str(data),
        validation,
        test,
        fmt,
        progress=show_progress(),
        reviewed=reviewed,
        store=str(cfg.store.path),
    )
    short = summary(receipt)
    if as_json:
        print_json(short)
        return
    metric = receipt["metric"]
    click.echo(f"saved {task} head to {out}")
    click.echo(
        f"{receipt['stopped']['message']}; batch size {short['batch_size']}, max length "
        f"{short['max_length']}"
    )
    click.echo(
        f"best epoch {short['best_epoch']}: validation {metric} {short['validation'][metric]:.4f}"
    )
    if short["test"]:
        click.echo(f"test {metric} {short['test'][metric]:.4f}")
    if short.get("baseline") and short["baseline"]["test"]:
        baseline = short["baseline"]
        click.echo(f"baseline ({baseline['name']}) test {metric} {baseline['test'][metric]:.4f}")
    click.echo(
        f"training {short['training_seconds']:.1f} s, {short['examples_per_second']:.1f} examples/s"
    )
    if receipt.get("reviewed"):
        r = receipt["reviewed"]
        click.echo(
            f"reviewed ({r['head']}): {r['added_to_train']} added to train, {r['stale']} "
            f"left out (text changed since), {r['in_eval']} left out (in validation/test)"
        )


class _TrainCommand(click.Command):
    """`bertindex train TASK`: its help is the head type's summary, read when shown (loading a
    head type loads torch, which a CLI start must not wait for)."""

    @property
    def help(self) -> str:
        return head_type(self.name).summary

    @help.setter
    def help(self, value) -> None:
        pass


def _add_train_command(task: str) -> None:
    """`bertindex train TASK` for one registered head type."""

    extra = (
        [
            click.option(
                "--reviewed",
                metavar="HEAD",
                help="Add the documents people labelled for HEAD in the store (`bertindex review "
                "import`) to the train split (never to validation or test).",
            )
        ]
        if capabilities(task).reviewable
        else []
    )
    if capabilities(task).blends:
        extra.append(
            click.option(
                "--blend",
                type=click.Choice(["base", "tuned", "off"]),
                default="base",
                show_default=True,
                help="Regression: after training, mix the head's score with a bi-encoder's cosine "
                "of the two texts, the weight chosen on validation (0: the head alone; kept in "
                "config.json). base: the base encoder; tuned: a copy of it fine-tuned on the "
                "train pairs, saved inside the head; off: the head alone.",
            )
        )

    @train.command(task, cls=_TrainCommand)
    @data_options
    @train_options
    @json_option
    @config_options
    @handle_errors
    def command(**options) -> None:
        _train(task, **options)

    for option in extra:
        option(command)


for _task in HEAD_TYPE_NAMES:
    _add_train_command(_task)


@train.command("rerank")
@click.option(
    "--beir",
    "folder",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="A BEIR-layout folder (corpus, queries, qrels/SPLIT.tsv); its corpus is "
    "indexed into --store first (unchanged documents are skipped).",
)
@click.option(
    "--split",
    default="train",
    show_default=True,
    help="The qrels split whose queries it trains on (never the one you score).",
)
@click.option(
    "--negatives",
    type=click.IntRange(0, 100),
    default=DEFAULT_NEGATIVES,
    show_default=True,
    help="Hard negatives per query, drawn from its top "
    "--mine-depth hybrid hits not judged relevant.",
)
@click.option(
    "--mine-depth",
    type=click.IntRange(1, 1000),
    default=MINE_DEPTH,
    show_default=True,
    help="Hybrid hits per query the negatives are drawn from.",
)
@click.option(
    "--collection",
    help="Collection the corpus is indexed into (default: the "
    "folder's name; `default` reuses a `bertindex index` store).",
)
@click.option(
    "--max-queries",
    type=click.IntRange(1),
    metavar="N",
    help="Use the first N queries of the split only (a quick run; recorded).",
)
@click.option(
    "--validation-share",
    type=click.FloatRange(0.05, 0.5),
    default=0.2,
    show_default=True,
    help="Share of the split's queries held out, whole, to pick the best epoch.",
)
@train_options
@json_option
@config_options
@handle_errors
def train_rerank(
    folder,
    split,
    negatives,
    mine_depth,
    collection,
    max_queries,
    validation_share,
    out,
    base,
    head_only,
    epochs,
    patience,
    max_epochs,
    probe_epochs,
    lr,
    max_length,
    batch_size,
    seed,
    pooling,
    as_json,
    config_path,
    store_path,
) -> None:
    """Train a pair head as a reranker from a BEIR-layout set: judged positives (score 1) and
    hard negatives (score 0) from the store's own hybrid hits; use it with `search --rerank`.

    Each passage is the hit's title and best window, cut so the pair fits --max-length (auto:
    256) as reranking cuts it; the receipt's `rerank_pairs` says how the pairs were drawn.
    """
    from indexer.reranker.train import PairSource, train_reranker

    if epochs != "auto" and (patience is not None or max_epochs is not None):
        raise click.UsageError("--patience and --max-epochs apply to --epochs auto only")
    stop = {k: v for k, v in (("patience", patience), ("max_epochs", max_epochs)) if v is not None}
    source = PairSource(
        Path(folder), split, collection, max_queries, negatives, mine_depth, validation_share
    )
    trained = train_reranker(
        build_config(config_path, store_path),
        source,
        Path(out),
        base=base,
        max_length=max_length,
        seed=seed,
        progress=show_progress(),
        head_only=head_only,
        epochs=epochs,
        probe_epochs=probe_epochs,
        lr=lr,
        batch_size=batch_size,
        pooling=pooling,
        **stop,
    )
    receipt, short = trained["receipt"], trained["summary"]
    if as_json:
        print_json(short)
        return
    record, weight = short["rerank_pairs"], short["rerank_weight"]
    click.echo(
        f"saved reranker to {out}: {record['pairs']} pairs ({record['positives']} "
        f"positive, {record['negatives']} negative) from {record['queries']} queries"
    )
    click.echo(
        f"{receipt['stopped']['message']}; validation spearman "
        f"{short['validation'][receipt['metric']]:.4f}"
    )
    click.echo(
        f"reranker's share of the order: {weight['weight']} (chosen by nDCG@10 on the "
        f"{weight['queries']} held-out queries)"
    )


@click.command("head")
@click.argument("model_dir", type=click.Path(exists=True, file_okay=False))
@data_options
@click.option(
    "--split",
    type=click.Choice(list(SPLITS)),
    default="test",
    show_default=True,
    help="Which split of the data to score.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 4096),
    default=64,
    show_default=True,
    help="Examples per forward pass.",
)
@click.option(
    "--decode",
    type=click.Choice(DECODE_CHOICES),
    default=DECODE_CHOICES[0],
    show_default=True,
    help="NER: most probable valid BIO sequence, or each word's most probable tag.",
)
@click.option(
    "--input",
    "input_kind",
    type=click.Choice(INPUT_CHOICES),
    default=INPUT_CHOICES[0],
    show_default=True,
    help="NER: score the split's pre-split words, or its words joined by spaces run "
    "as raw text through the annotate path (the figure annotate delivers; BIO decoding, "
    "the config's dtype and windows).",
)
@json_option
@config_options
@handle_errors
def eval_head(
    model_dir,
    data,
    validation,
    test,
    fmt,
    split,
    batch_size,
    decode,
    input_kind,
    as_json,
    config_path,
    store_path,
) -> None:
    """Score a saved head on a labelled split: macro_f1 or entity_f1, with per-class detail.

    --data is a file holding the splits (JSON, TweetEval folder), or the file of --split.
    """
    from transformers import AutoConfig

    from indexer.errors import ModelError
    from indexer.heads.data import read_head_data
    from indexer.heads.evaluate import evaluate_head
    from indexer.heads.registry import head_type_of

    config = build_config(config_path, store_path)  # a broken config is reported as everywhere
    if input_kind == "raw-text" and decode != DECODE_CHOICES[0]:
        raise click.UsageError(
            f"--input raw-text runs the annotate path, which decodes "
            f"{DECODE_CHOICES[0]} only; drop --decode {decode}"
        )
    try:
        kind = head_type_of(AutoConfig.from_pretrained(model_dir))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{model_dir}: not a saved head: {exc}") from None
    splits = read_head_data(kind.name, data, validation, test, fmt, single_split=split)
    if input_kind == "raw-text":
        from indexer.annotate.raw_eval import evaluate_raw_text

        scores = evaluate_raw_text(model_dir, splits, config, split)
    else:
        scores = evaluate_head(model_dir, splits, split, batch_size, decode)
    if as_json:
        print_json(scores)
        return
    metric = scores["metric"]
    click.echo(f"{split}: {scores['examples']} examples, {metric} {scores[metric]:.4f}")
    detail = scores.get("per_class") or scores.get("per_type") or {}
    click.echo(f"{'':<16}{'precision':>10}{'recall':>10}{'f1':>10}{'support':>9}")
    for name, row in detail.items():
        click.echo(
            f"{name:<16}{row['precision']:>10.4f}{row['recall']:>10.4f}{row['f1']:>10.4f}{row['support']:>9}"
        )


if __name__ == "__main__":  # python -m search.cli.heads train ... | head ...
    cli = click.Group(name="bertindex-heads", help="Fine-tuned heads (train, eval head).")
    cli.add_command(train)
    cli.add_command(eval_head, name="head")
    cli()
