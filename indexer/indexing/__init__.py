"""The indexing loop: read -> plan -> encode -> commit -> publish, batch by batch (`run`), over the
steps in `steps`. Orchestration above the readers, encoder, store and indexes."""
