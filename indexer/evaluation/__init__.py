"""Evaluation on public benchmarks: BEIR retrieval (`beir`, scored by `metrics`) and STS
similarity (`sts`)."""
