"""The BIO token tagger head type (`head_type`, NER), how it cuts raw text into its training
words (`segment`) and its score on raw text (`raw_text`)."""
