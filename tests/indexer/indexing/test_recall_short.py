"""An index whose tuning misses the target recall says so in the run summary, not only in a
log line (`indexer.indexing.steps.short_of_target`)."""

from indexer.indexing.steps import short_of_target


def test_a_missed_target_is_reported_with_what_was_reached():
    tuning = {"param": "nprobe", "value": 4096, "recall@10": 0.53, "target": 0.95}
    assert short_of_target(tuning | {"reached": False}) == {
        "recall_short": {"recall@10": 0.53, "target": 0.95, "param": "nprobe", "value": 4096}
    }


def test_a_reached_target_or_an_exact_index_adds_nothing():
    assert short_of_target({"param": "nprobe", "value": 8, "reached": True}) == {}
    assert short_of_target(None) == {}
