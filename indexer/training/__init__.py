"""The one optimiser loop every trained model here shares (heads, pair heads' bi-encoder,
`adapt`): AdamW, the warm-up-then-decay schedule, the gradient-norm clip, bf16 autocast, an
epoch of steps with its progress bar, and atomic checkpoints. What a model learns and when a
run stops stay with the caller (an epoch-end hook); this package knows no head and no data."""
