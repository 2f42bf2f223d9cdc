"""Encode: tokenizer -> transformer -> pooling -> normalise, in length-sorted batches."""
