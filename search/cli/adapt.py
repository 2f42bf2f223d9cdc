"""`bertindex adapt`: continue the encoder's masked-LM pretraining on unlabelled text (corpus
files or a store collection), then fine-tune heads on it with `train ... --base DIR` or
index with `model.name: DIR`. Thin layer: options in, `flows.adapt` / `indexer.adapt` do the
work.
"""

from __future__ import annotations

from pathlib import Path

import click

from indexer.config.flows import SourceConfig
from indexer.ingest.formats import format_names
from search.cli.common import (
    build_config,
    config_default,
    config_options,
    handle_errors,
    json_option,
    print_json,
    show_progress,
)


@click.command()
@click.argument("files", nargs=-1, type=click.Path(exists=True))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(format_names()),
    default="auto",
    show_default=True,
    help="Input format of FILES; auto goes by file name.",
)
@click.option(
    "--collection",
    help="Without FILES: adapt on this collection of --store "
    f"(default {config_default(SourceConfig, 'collection')!r}).",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory for the adapted encoder (new or empty; one holding an "
    "unfinished run is resumed).",
)
@click.option(
    "--base", help="Encoder directory to start from (default: the configured model.name)."
)
@click.option(
    "--epochs",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="Passes over the text (--max-tokens may stop sooner).",
)
@click.option(
    "--max-tokens",
    type=click.IntRange(1),
    metavar="N",
    help="Stop after training on N tokens (padding not counted); the schedule decays to 0 there.",
)
@click.option(
    "--max-length",
    type=click.IntRange(8, 512),
    default=128,
    show_default=True,
    help="Tokens per sequence; longer texts are cut into windows, none is lost.",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, 4096),
    default=32,
    show_default=True,
    help="Sequences per step.",
)
@click.option(
    "--lr",
    type=click.FloatRange(0, 1, min_open=True),
    default=5e-5,
    show_default=True,
    help="Peak learning rate (AdamW; linear warm-up, then decay).",
)
@click.option(
    "--warmup",
    type=click.FloatRange(0, 0.5),
    default=0.06,
    show_default=True,
    help="Share of the steps the learning rate warms up over.",
)
@click.option(
    "--mask-prob",
    type=click.FloatRange(0.01, 0.5),
    default=0.15,
    show_default=True,
    help="Share of tokens chosen (of them 80 % masked, 10 % random, 10 % kept).",
)
@click.option(
    "--whole-word",
    is_flag=True,
    help="Choose whole words: all subwords of a chosen word are chosen.",
)
@click.option(
    "--held-out",
    type=click.FloatRange(0, 0.5),
    default=0.02,
    show_default=True,
    help="Share of the documents held out to score each epoch (at most 2,000 sequences).",
)
@click.option("--seed", type=int, default=42, show_default=True, help="Random seed.")
@click.option(
    "--checkpoint-minutes",
    type=click.FloatRange(0.1),
    default=5.0,
    show_default=True,
    help="Write a checkpoint this often (and after each epoch); "
    "a killed run resumes from it when started again.",
)
@json_option
@config_options
@handle_errors
def adapt(
    files,
    fmt,
    collection,
    out,
    base,
    epochs,
    max_tokens,
    max_length,
    batch_size,
    lr,
    warmup,
    mask_prob,
    whole_word,
    held_out,
    seed,
    checkpoint_minutes,
    as_json,
    config_path,
    store_path,
) -> None:
    """Continue the encoder's masked-LM pretraining on FILES (any format `index` reads;
    .txt: one text per line) or on a collection of the store.

    15 % of the tokens are chosen (never special tokens or padding); of those 80 % become
    the mask token, 10 % a random token, 10 % stay; the loss is on the chosen ones only. A
    model without an MLM head gets a fresh one tied to its word embeddings. The result is an
    encoder directory (`train classifier|ner|pair --base DIR`, `model.name: DIR`) with
    `adapt-receipt.json` (tokens, held-out loss and masked-token accuracy per epoch, the
    rule, the data) and the head in `mlm-head.safetensors`.
    """
    from flows.runtime import wait_for_api, warm_up_api

    warm_up_api()
    from indexer.adapt.masking import MaskRule
    from indexer.adapt.run import AdaptSettings, check_out
    from indexer.config import resolve_model_path

    cfg = build_config(config_path, store_path)
    if files and collection:
        raise click.UsageError("give FILES or --collection, not both")
    check_out(Path(out))  # before any text is read
    settings = AdaptSettings(
        base=resolve_model_path(base or cfg.model.name),
        out=Path(out),
        epochs=epochs,
        max_tokens=max_tokens,
        max_length=max_length,
        batch_size=batch_size,
        lr=lr,
        warmup_ratio=warmup,
        seed=seed,
        held_out=held_out,
        rule=MaskRule(mask_prob=mask_prob, whole_word=whole_word),
        dtype=cfg.model.dtype,
        checkpoint_seconds=checkpoint_minutes * 60,
    )
    from flows.adapt import adapt_encoder

    wait_for_api()
    receipt = adapt_encoder(
        settings,
        list(files),
        fmt,
        str(cfg.store.path),
        collection or config_default(SourceConfig, "collection"),
        show_progress(),
    )
    if as_json:
        print_json(receipt)
        return
    last = receipt["history"][-1]
    click.echo(
        f"saved the adapted encoder to {out}: {receipt['tokens_seen']:,} tokens in "
        f"{receipt['steps']:,} steps, {receipt['tokens_per_second']:,.0f} tokens/s"
    )
    click.echo(
        f"held-out loss {receipt['history'][0]['held_out_loss']} -> "
        f"{last['held_out_loss']}, masked-token accuracy "
        f"{receipt['history'][0]['held_out_accuracy']} -> {last['held_out_accuracy']}"
    )
