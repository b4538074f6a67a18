"""benchmarks.search_trust's chooser: the readout a sweep ships is the one with the best mean over the
validation sets, the first listed on a tie, and a sweep with uneven sets is refused."""
import pytest


def test_best_setting_takes_the_best_mean_and_the_first_on_a_tie(load_benchmark):
    best_setting = load_benchmark("search_trust").best_setting
    scores = {"cells-5": {"photos": 0.64, "fmnist": 0.34}, "image-20": {"photos": 0.82, "fmnist": 0.31},
              "image-5": {"photos": 0.80, "fmnist": 0.26}}
    assert best_setting(scores) == "image-20"  # mean 0.565 against 0.49 and 0.53
    tie = {"a": {"x": 0.5, "y": 0.3}, "b": {"x": 0.3, "y": 0.5}}
    assert best_setting(tie) == "a"
    with pytest.raises(ValueError):
        best_setting({"a": {"x": 0.5}, "b": {"y": 0.5}})
    with pytest.raises(ValueError):
        best_setting({})
