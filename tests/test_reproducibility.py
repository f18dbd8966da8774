"""The tolerance a GPU run is held to (tests/reproducibility.py), checked on made-up results: no GPU is needed
to see that it passes a resume within the floor and fails one beyond it, or one on a CPU that is not exact."""

import pytest
from reproducibility import FLOOR_MULTIPLE, assert_reproduces, gap


def run(device, *losses, test=0.5):
    return {"provenance": {"device": device}, "test_metric": test,
            "history": [{"train_loss": loss, "val_metric": 0.25} for loss in losses]}


def test_on_a_cpu_only_the_same_numbers_pass():
    assert_reproduces(run("cpu", 1.0, 0.5), run("cpu", 1.0, 0.5), again=lambda: pytest.fail("no second run on a CPU"))
    with pytest.raises(AssertionError):
        assert_reproduces(run("cpu", 1.0, 0.5 + 1e-7), run("cpu", 1.0, 0.5), again=lambda: run("cpu", 1.0, 0.5))


@pytest.mark.parametrize("resumed_gap, passes", [(0.0, True), (FLOOR_MULTIPLE * 1e-4, True),
                                                 (2 * FLOOR_MULTIPLE * 1e-4, False)])
def test_on_a_gpu_the_resume_gap_is_held_to_a_multiple_of_two_uninterrupted_runs_gap(resumed_gap, passes):
    full, again = run("cuda", 1.0, 0.5), run("cuda", 1.0, 0.5 + 1e-4)
    resumed = run("cuda", 1.0, 0.5 + resumed_gap)
    if passes:
        assert_reproduces(resumed, full, lambda: again)
    else:
        with pytest.raises(AssertionError, match="x the floor"):
            assert_reproduces(resumed, full, lambda: again)


def test_a_deterministic_gpu_asks_for_exact_numbers():
    with pytest.raises(AssertionError):
        assert_reproduces(run("cuda", 1.0, 0.5 + 1e-9), run("cuda", 1.0, 0.5), lambda: run("cuda", 1.0, 0.5))


def test_histories_of_different_lengths_are_infinitely_apart():
    assert gap(run("cuda", 1.0), run("cuda", 1.0, 0.5)) == float("inf")
