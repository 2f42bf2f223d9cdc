"""The review loop: pick the documents a head is least sure about (`strategies`), export them
for a person to label (`export`), read the labelled file back with per-row reasons (`rows`,
`importer`), and add the reviewed documents to a training split (`training`). The SQL is in
`indexer.store.reviews`; no Click, no Prefect."""
