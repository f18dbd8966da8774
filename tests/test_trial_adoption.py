"""A trial Tune lost with its driver (started after Tune's last experiment snapshot) is run again under a
new trial id; its run directory is adopted, so it continues from its checkpoint (trainable.adopt_orphan)."""

from sptune import atomic, files
from sptune.trials import trainable

PARAMS = {"optim.lr": 0.001, "optim.batch_size": 8}


def make_run(stage_dir, trial_id, params, finished=False):
    run = stage_dir / trainable.run_name("scratch", trial_id, params)
    run.mkdir(parents=True)
    atomic.write_json(run / files.TRIAL, {"trial_id": trial_id, "params": params, "attempts": [{"start_step": 0}]})
    (run / files.LAST).write_bytes(b"checkpoint")
    if finished:
        atomic.write_json(run / files.RESULT, {"status": "completed"})
    return run


def test_the_lost_trials_directory_is_renamed_with_its_checkpoint_and_record(tmp_path):
    lost = make_run(tmp_path / "scratch", "a_00001", PARAMS)
    other = make_run(tmp_path / "scratch", "a_00002", {"optim.lr": 0.0005, "optim.batch_size": 8})
    new = tmp_path / "scratch" / trainable.run_name("scratch", "b_00000", PARAMS)
    trainable.adopt_orphan(new, "b_00000", PARAMS)
    assert not lost.exists() and other.is_dir()
    assert (new / files.LAST).read_bytes() == b"checkpoint"
    record = files.read_json(new / files.TRIAL)
    assert record["trial_id"] == "b_00000" and record["previous_trial_ids"] == ["a_00001"]
    assert record["attempts"] == [{"start_step": 0}]


def test_a_finished_lost_trial_is_adopted_too_so_it_is_not_run_again(tmp_path):
    make_run(tmp_path / "scratch", "a_00001", PARAMS, finished=True)
    new = tmp_path / "scratch" / trainable.run_name("scratch", "b_00000", PARAMS)
    trainable.adopt_orphan(new, "b_00000", PARAMS)
    assert files.finished_result(new) == {"status": "completed"}


def test_nothing_is_adopted_for_a_new_point_or_a_trial_with_its_own_directory(tmp_path):
    mine = make_run(tmp_path / "scratch", "a_00001", PARAMS)
    trainable.adopt_orphan(mine, "a_00001", PARAMS)  # a restored trial keeps its directory
    assert files.read_json(mine / files.TRIAL)["trial_id"] == "a_00001"
    fresh = {"optim.lr": 0.01, "optim.batch_size": 8}
    new = tmp_path / "scratch" / trainable.run_name("scratch", "b_00000", fresh)
    trainable.adopt_orphan(new, "b_00000", fresh)
    assert not new.exists() and mine.is_dir()
    trainable.adopt_orphan(tmp_path / "pretrain" / "x", "c", PARAMS)  # no stage directory yet: nothing to do


def test_a_trial_start_reads_no_record_of_a_sibling_at_another_point(tmp_path):
    """The search for a lost trial's directory reads only the directories named for the trial's own params, so
    a trial's start costs the same in a stage of 3 trials as in one of 300 (it read every sibling's trial.json)."""
    from open_watch import own_opens

    for index in range(40):
        make_run(tmp_path / "scratch", f"a_{index:05d}", {"optim.lr": 0.002 + index, "optim.batch_size": 8})
    lost = make_run(tmp_path / "scratch", "a_00099", PARAMS)
    fresh = {"optim.lr": 0.5, "optim.batch_size": 8}
    with own_opens(files.TRIAL) as own:
        trainable.adopt_orphan(tmp_path / "scratch" / trainable.run_name("scratch", "b_00000", fresh), "b_00000", fresh)
        assert own.counts() == {}
        new = tmp_path / "scratch" / trainable.run_name("scratch", "b_00001", PARAMS)
        trainable.adopt_orphan(new, "b_00001", PARAMS)
    assert not lost.exists() and own.counts(writes=False) == {str((lost / files.TRIAL).resolve()): 1}
