"""Continued masked-language-model pretraining of the encoder on unlabelled text (`bertindex
adapt`): the source documents' masking rule (`masking`), the model with its MLM head
(`mlm`), the corpus (`corpus`) and the resumable training run (`run`)."""
