"""The review loop: pick the documents a head is least sure about (`strategies`), select and
import rows with per-row reasons (`loop`), read and write review files (`files`), the
commands' library side (`run`: export, import and publish), and the reviewed documents as a
training split (`training`). The SQL is the store's (`Store` review methods,
`indexer/store/reviews.py`); no Click, no Prefect."""
