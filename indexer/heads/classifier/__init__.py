"""The sentence classifier head type (`head_type`) and its TF-IDF baseline (`tfidf`)."""
