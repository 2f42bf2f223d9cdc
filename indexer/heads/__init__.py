"""Fine-tuned heads on the encoder: a sentence classifier or a BIO token tagger (NER).

`types` holds one module per head type behind one interface (`types.base.HeadType`), named in
`types.registry`; `data` reads labelled splits, `train` fine-tunes and saves a standard
transformers model directory, `evaluate` scores a saved head on a split, `predict` loads one
for use. Nothing here imports Prefect or Click.
"""
