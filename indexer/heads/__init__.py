"""Fine-tuned heads on the encoder, one sub-package per type: `classifier` (a sentence
classifier), `tagger` (a BIO token tagger, NER) and `pair` (a cross-encoder scoring pairs).

Each type implements one interface (`base.HeadType`) and is named, with what only it can do
(`Capabilities`), in `registry`; the rest is shared: `data` reads labelled splits through the
ingest format registry, `train` fine-tunes and saves a standard transformers model directory,
`evaluate` scores a saved head on a split, `predict` loads one for use. Nothing here imports
Prefect or Click.
"""
