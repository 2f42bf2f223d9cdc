"""Tiny random encoders of every family bertindex claims, built in process (nothing is
downloaded): a config (hidden 32, 2 layers, a small vocabulary), random weights, and a
tokenizer trained here with `tokenizers` on a few hundred generated sentences, saved as a HF
directory the way the family's real checkpoints are (its own tokenizer class, its special
tokens, its pad id); optionally in sentence-transformers layout as well.

Used by tests/indexer/encode/test_families.py and tests/indexer/adapt/test_adapt.py; does not
test anything itself.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

PEOPLE = ["john", "mary", "luca", "giulia", "anna", "jürgen", "minh", "sophie", "carlos", "ahmed"]
PLACES = ["paris", "london", "milano", "berlin", "hanoi", "madrid", "lisbon", "amsterdam", "roma"]
ORGS = ["acme", "spurs", "unesco", "siemens", "fiat", "vinfast", "nasa"]
WORDS = [
    "the",
    "a",
    "good",
    "bad",
    "movie",
    "film",
    "great",
    "awful",
    "lives",
    "in",
    "works",
    "at",
    "and",
    "is",
    "very",
    "not",
    "play",
    "playing",
    "new",
    "loves",
    "hates",
    "this",
    "cat",
    "dog",
    "sat",
    "on",
    "mat",
    "sofa",
    "river",
    "mountain",
    "city",
    "train",
    "fast",
    "slow",
    "search",
    "index",
    "vector",
    "query",
    "text",
    "document",
    "café",
    "über",
    "straße",
    "perché",
    "città",
    "#spurs",
    "u.s.",
    "don't",
    "e-mail",
    "2024",
]


def sentences(n: int = 400, seed: int = 0) -> list[str]:
    """`n` generated sentences (names, places, organisations, accents, hashtags, numbers)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 12))]
        words.insert(rng.randrange(len(words)), rng.choice(PEOPLE).capitalize())
        words.insert(rng.randrange(len(words)), rng.choice(PLACES).capitalize())
        if rng.random() < 0.5:
            words.insert(rng.randrange(len(words)), rng.choice(ORGS).upper())
        out.append(" ".join(words) + rng.choice([".", "!", "?", ""]))
    return out


@dataclass(frozen=True)
class Family:
    """One encoder family: its config class and kwargs, tokenizer kind and specials."""

    name: str
    config: str  # transformers config class name
    model: str  # transformers base model class name
    tokenizer: str  # transformers tokenizer class name ("" for PreTrainedTokenizerFast)
    kind: str  # wordpiece, bpe (byte-level), unigram (SentencePiece)
    specials: tuple[str, ...]  # in id order: specials[0] gets id 0
    extra: tuple[tuple[str, object], ...] = ()  # config kwargs
    positions: int = 66  # max_position_embeddings
    usable: int = 66  # the usable length bertindex must find (padding offset, tokenizer)


BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
ROBERTA_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")

FAMILIES = {
    f.name: f
    for f in [
        Family("bert", "BertConfig", "BertModel", "BertTokenizer", "wordpiece", BERT_SPECIALS),
        Family(
            "roberta",
            "RobertaConfig",
            "RobertaModel",
            "RobertaTokenizer",
            "bpe",
            ROBERTA_SPECIALS,
            (("type_vocab_size", 1),),
            positions=66,
            usable=64,
        ),
        Family(
            "xlm-roberta",
            "XLMRobertaConfig",
            "XLMRobertaModel",
            "XLMRobertaTokenizer",
            "unigram",
            ROBERTA_SPECIALS,
            (("type_vocab_size", 1),),
            positions=66,
            usable=64,
        ),
        Family(
            "distilbert",
            "DistilBertConfig",
            "DistilBertModel",
            "DistilBertTokenizer",
            "wordpiece",
            BERT_SPECIALS,
        ),
        Family(
            "albert",
            "AlbertConfig",
            "AlbertModel",
            "AlbertTokenizer",
            "unigram",
            ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"),
            (("embedding_size", 16),),
        ),
        Family(
            "electra",
            "ElectraConfig",
            "ElectraModel",
            "ElectraTokenizer",
            "wordpiece",
            BERT_SPECIALS,
            (("embedding_size", 16),),
        ),
        # relative attention only (as deberta-v3): the tokenizer's model_max_length is the limit
        Family(
            "deberta-v2",
            "DebertaV2Config",
            "DebertaV2Model",
            "DebertaV2Tokenizer",
            "unigram",
            BERT_SPECIALS,
            (
                ("relative_attention", True),
                ("position_biased_input", False),
                ("pos_att_type", ["p2c", "c2p"]),
                ("max_relative_positions", -1),
                ("position_buckets", 32),
            ),
            positions=512,
            usable=48,
        ),
        Family(
            "mpnet",
            "MPNetConfig",
            "MPNetModel",
            "MPNetTokenizer",
            "wordpiece",
            ("<s>", "<pad>", "</s>", "[UNK]", "<mask>"),
            positions=66,
            usable=64,
        ),
        Family(
            "modernbert",
            "ModernBertConfig",
            "ModernBertModel",
            "",
            "bpe",
            BERT_SPECIALS,
            (("global_attn_every_n_layers", 2), ("local_attention", 16)),
            positions=128,
            usable=128,
        ),
    ]
}


def available(name: str) -> bool:
    """True when the installed transformers has the family's model class."""
    import transformers

    return hasattr(transformers, FAMILIES[name].model)


def _train_tokenizer(family: Family, texts: list[str], vocab_size: int):
    """A `tokenizers` model trained on `texts`: (vocab, merges) for the family's class."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    specials = list(family.specials)
    unk = next(t for t in specials if "unk" in t.lower())
    if family.kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token=unk))
        tok.normalizer = normalizers.BertNormalizer(lowercase=True)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.train_from_iterator(
            texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=specials)
        )
        return tok.get_vocab(), None
    if family.kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.train_from_iterator(
            texts,
            trainers.BpeTrainer(
                vocab_size=vocab_size,
                special_tokens=specials,
                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            ),
        )
        model = json.loads(tok.to_str())["model"]
        return model["vocab"], [
            tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]
        ]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Lowercase() if family.name == "albert" else None
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.train_from_iterator(
        texts,
        trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials, unk_token=unk),
    )
    return [tuple(p) for p in json.loads(tok.to_str())["model"]["vocab"]], None


def _hf_tokenizer(family: Family, vocab, merges):
    """The family's own tokenizer class over the trained vocabulary."""
    import transformers

    if family.name == "modernbert":  # ModernBERT ships a PreTrainedTokenizerFast (byte BPE)
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

        tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]",
            pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
        )
        return transformers.PreTrainedTokenizerFast(
            tokenizer_object=tok,
            unk_token="[UNK]",
            pad_token="[PAD]",
            cls_token="[CLS]",
            sep_token="[SEP]",
            mask_token="[MASK]",
            model_max_length=family.usable,
            model_input_names=["input_ids", "attention_mask"],
        )
    cls = getattr(transformers, family.tokenizer)
    kwargs = {
        "vocab": vocab,
        "model_max_length": family.usable,
        "unk_token": next(t for t in family.specials if "unk" in t.lower()),
    }
    if merges is not None:
        kwargs["merges"] = merges
    return cls(**kwargs)


def build_family(name: str, path: Path, vocab_size: int = 500, seed: int = 0) -> Path:
    """Save a tiny random model of family `name` with its trained tokenizer to `path`.

    Args:
        name: a key of FAMILIES.
        path: the directory to write (created).
        vocab_size: the tokenizer's vocabulary (specials included).
        seed: torch's seed for the random weights.
    Returns:
        `path`.
    """
    import torch
    import transformers

    family = FAMILIES[name]
    path.mkdir(parents=True, exist_ok=True)
    vocab, merges = _train_tokenizer(family, sentences(), vocab_size)
    tokenizer = _hf_tokenizer(family, vocab, merges)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in family.specials}
    size = max(len(tokenizer), vocab_size)
    config_cls = getattr(transformers, family.config)
    kwargs = dict(
        vocab_size=size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=37,
        max_position_embeddings=family.positions,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.5,
    )
    if name == "distilbert":
        kwargs = dict(
            vocab_size=size,
            dim=32,
            n_layers=2,
            n_heads=4,
            hidden_dim=37,
            max_position_embeddings=family.positions,
            pad_token_id=tokenizer.pad_token_id,
            initializer_range=0.5,
        )
    if name == "modernbert":
        kwargs.update(
            cls_token_id=ids["[CLS]"],
            sep_token_id=ids["[SEP]"],
            bos_token_id=ids["[CLS]"],
            eos_token_id=ids["[SEP]"],
        )
    elif family.specials[0] == "<s>":
        kwargs.update(bos_token_id=ids["<s>"], eos_token_id=ids["</s>"])
    kwargs.update(dict(family.extra))
    torch.manual_seed(seed)
    model = getattr(transformers, family.model)(config_cls(**kwargs)).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def save_sentence_transformers(model_dir: Path, path: Path, max_seq_length: int) -> Path:
    """The same weights in sentence-transformers layout (Transformer, mean Pooling,
    Normalize), saved by sentence-transformers itself.

    Returns:
        `path`.
    """
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    transformer = models.Transformer(str(model_dir), max_seq_length=max_seq_length)
    pooling = models.Pooling(transformer.get_embedding_dimension(), "mean")
    SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device="cpu").save(
        str(path)
    )
    return path
