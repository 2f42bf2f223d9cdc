"""One encoder pass for the index and the heads: when the heads are head-only heads on the
index's encoder, `Annotator.share_embedding` lets each batch's backbone pass give the index's
vectors too. Checked against the separate passes (the index's `Encoder` and a plain
`Annotator`) on the tiny random BERT, for every pooling; the fall-backs name their reason; the
inbox run gives the store that separate indexing and annotating give.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from head_kit import head_args, save_head

from flows.annotate import build_annotator, run_annotate
from indexer.encode.encoder import Encoder
from indexer.indexing.run import run_index
from indexer.indexing.steps import encode_documents
from indexer.store import Store

WORDS = ["red", "apple", "green", "pear", "blue", "river", "big", "mountain", "zürich"]
TEXTS = [
    "the cat sat on the mat",
    "a dog",
    " ".join(WORDS * 5),  # several 16-token windows
    "parse command line arguments in python",
    "sofa",
    " ".join(WORDS[:6]),
]


def _pair(config, heads):
    """The index's encoder and an annotator sharing its pass (asserted)."""
    encoder = Encoder(config.model)
    annotator = build_annotator(head_args(heads), config)
    assert annotator.share_embedding(encoder, config) is None
    return encoder, annotator


@pytest.mark.parametrize(
    "pooling, normalize", [("mean", True), ("cls", False), ("pooler", True), ("last4", True)]
)
def test_shared_pass_equals_the_separate_passes(tiny_config, heads, pooling, normalize):
    config = tiny_config.with_overrides(**{"model.pooling": pooling, "model.normalize": normalize})
    encoder, annotator = _pair(config, heads)
    annotations, chunks = annotator.annotate_and_embed(TEXTS)

    _, expected = encode_documents(encoder, TEXTS, config)  # the index's own pass
    assert chunks.doc_ids == expected.doc_ids and chunks.ordinals == expected.ordinals
    assert (chunks.starts, chunks.ends) == (expected.starts, expected.ends)
    assert chunks.n_tokens == expected.n_tokens
    assert max(chunks.ordinals) >= 2  # the long text really is windowed
    assert chunks.vectors.shape == expected.vectors.shape == (len(expected.doc_ids), encoder.dim)
    np.testing.assert_allclose(chunks.vectors, expected.vectors, atol=2e-5, rtol=1e-4)

    alone = build_annotator(head_args(heads), config).annotate(TEXTS)  # the heads' own pass
    for got, want in zip(annotations, alone):
        assert [(x.head, x.label) for x in got.labels] == [(x.head, x.label) for x in want.labels]
        assert [x.score for x in got.labels] == pytest.approx(
            [x.score for x in want.labels], abs=1e-5
        )
        assert [(e.type, e.start, e.end, e.text) for e in got.entities] == [
            (e.type, e.start, e.end, e.text) for e in want.entities
        ]
    assert annotations[2].entities and annotations[2].entities[-1].text == "zürich"


def test_shared_pass_is_refused_with_the_reason(tiny_config, heads, tmp_path):
    encoder = Encoder(tiny_config.model)

    def reason(config, chosen=None):
        annotator = build_annotator(chosen or head_args(heads), config)
        out = annotator.share_embedding(encoder, config)
        with pytest.raises(Exception, match="share_embedding"):
            annotator.annotate_and_embed(["x"])
        return out

    assert "truncate" in reason(tiny_config.with_overrides(**{"long_documents.mode": "truncate"}))
    # the index's windows start with the document prompt, the heads' do not
    prompted = tiny_config.with_overrides(**{"model.document_prompt": "query"})
    assert "document_prompt" in build_annotator(head_args(heads), prompted).share_embedding(
        Encoder(prompted.model), prompted
    )
    # the heads cap the stride at max_length // 4 = 4 tokens; the index would use 5
    assert "stride 4" in reason(tiny_config.with_overrides(**{"long_documents.stride": 5}))
    # a fully fine-tuned head: its backbone weights are no longer the encoder's
    from transformers import BertForSequenceClassification

    tuned = BertForSequenceClassification.from_pretrained(heads["clf"])
    with torch.no_grad():
        tuned.bert.encoder.layer[0].output.dense.bias.add_(0.01)
    tuned_dir = save_head(tuned, heads["clf"], tmp_path / "tuned")
    assert "head-only" in reason(tiny_config, [f"tuned={tuned_dir}"])
    # an int8 index encoder: the heads' fp32 pass is not what it computes
    encoder = Encoder(tiny_config.model.model_copy(update={"dtype": "int8"}))
    assert "encodes in int8" in reason(tiny_config)


def _store_contents(store_path):
    with Store(Path(store_path)) as store:
        vectors = store.con.execute(
            "SELECT d.external_id, c.ordinal, c.start_char, c.end_char, v.embedding "
            "FROM documents d JOIN chunks c USING (doc_id) JOIN vectors v USING (chunk_id) "
            "ORDER BY 1, 2"
        ).fetchall()
        labels = store.con.execute(
            "SELECT d.external_id, a.head, a.label, a.probability FROM annotations a "
            "JOIN documents d USING (doc_id) ORDER BY 1, 2"
        ).fetchall()
        entities = store.con.execute(
            "SELECT d.external_id, e.head, e.type, e.start_char, e.end_char, e.text "
            "FROM entities e JOIN documents d USING (doc_id) ORDER BY 1, 4"
        ).fetchall()
    return vectors, labels, entities


def test_inbox_in_one_pass_gives_the_store_of_separate_passes(tiny_config, heads, tmp_path):
    import json

    inbox = tmp_path / "inbox"
    inbox.mkdir()
    rows = [{"id": f"t{i}", "text": t} for i, t in enumerate(TEXTS)]
    rows.append({"id": "titled", "title": "green pear", "text": "the dog slept on the sofa"})
    (inbox / "drop.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    summary = run_annotate(head_args(heads), tiny_config, "tweets", inbox=str(inbox))
    assert summary["shared_pass"] is True and summary["separate_pass_reason"] is None
    assert summary["annotated"] == len(rows) and summary["files"][0]["annotated"] == len(rows)

    separate = tiny_config.with_overrides(**{"store.path": str(tmp_path / "separate")})
    run_index([str(inbox / "drop.jsonl")], separate, "tweets")
    run_annotate(head_args(heads), separate)

    one, two = _store_contents(tiny_config.store.path), _store_contents(separate.store.path)
    assert [r[:4] for r in one[0]] == [r[:4] for r in two[0]]
    np.testing.assert_allclose(
        np.array([r[4] for r in one[0]]), np.array([r[4] for r in two[0]]), atol=2e-5, rtol=1e-4
    )
    assert [r[:3] for r in one[1]] == [r[:3] for r in two[1]]
    assert [r[3] for r in one[1]] == pytest.approx([r[3] for r in two[1]], abs=1e-5)
    assert one[2] == two[2] and len(one[2]) > len(rows)  # the titled text's entities: text only
    again = run_annotate(head_args(heads), tiny_config, "tweets", inbox=str(inbox))
    assert again["annotated"] == 0 and again["skipped_files"] == 1
