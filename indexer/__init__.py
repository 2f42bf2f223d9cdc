"""bertindex library: read corpora, encode them with a BERT encoder, store vectors and metadata.

Usable from a notebook: nothing here imports Prefect or Click.
"""

__version__ = "0.1.0"
