"""A test metric for every trial that ASHA stopped early, at its own best-validation checkpoint.

A stopped trial ends at a rung, inside Tune, without the stage's final test evaluation (sptune.run.train.run_stage
step 7). Once its stage has ended, `test_stopped` evaluates the test split at each such trial's best.pt
(chosen on validation, as for a completed trial) and writes its result.json with status `stopped`, so
results.csv gives it a test metric and its whole cost. Selection stays validation-only and among completed
trials (results.best_row): the test metric of a stopped trial is reported, never used to choose.

Run after the stage, not inside the trial (Tune ends a stopped trial at its report, with no place to run
more code), and on a worker: the engine submits `test_on_worker`, a Ray task with a trial's resources, and
marks the stage done when it ended. Robust to a killed driver: a trial without result.json is tested again
at the next resume, and result.json is written atomically, last.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sptune import files
from sptune.run import checkpoints

log = logging.getLogger("sptune.engine")

STATUS = "stopped"


def test_stopped(study_dir: Path, stage: str, crashed: frozenset[str] = frozenset()) -> list[Path]:
    """Test every trial of an ended stage that has a best checkpoint but no result and no crash record (nor
    is among `crashed`, the Tune trial ids the engine was told crashed);
    returns their run directories. The trial's TensorBoard HParams outcome (written `stopped` by
    sptune.trials.outcomes) gets the test metric too."""
    stage_dir = Path(study_dir) / stage
    if not stage_dir.is_dir():
        return []
    tested = []
    for run_dir in sorted(p.parent for p in stage_dir.glob(f"*/{files.TRIAL}")):
        if any((run_dir / name).is_file() for name in (files.RESULT, files.TRIAL_ERROR)):
            continue
        if not (run_dir / files.BEST).is_file() or not (run_dir / files.LAST).is_file():
            continue  # stopped before its first eval: nothing to test (results lists it as stopped)
        trial = files.read_json(run_dir / files.TRIAL)
        if trial.get("trial_id") in crashed:
            continue  # Tune reported it crashed; its error.json may not be written yet (callbacks run after)
        result = stopped_result(run_dir, stage, int(trial.get("workers", 1)))
        from sptune.trials import trainable  # (its TensorBoard writer imports torch: only where a trial stopped)

        trainable.write_outcome(run_dir, result, result["steps"])
        log.info("%s: stopped early at step %d, test %s %.4f at its best checkpoint (step %d)", run_dir.name,
                 result["steps"], result["metric"], result["test_metric"], result["best_step"])
        tested.append(run_dir)
    return tested


def stopped_result(run_dir: Path, stage: str, world: int = 1) -> dict[str, Any]:
    """Evaluate the test split at run_dir/best.pt and write result.json (status `stopped`) from last.pt's state."""
    import torch

    from sptune import config
    from sptune.build import count_parameters
    from sptune.registry import task_of
    from sptune.run import train
    from sptune.run.data import stage_steps, train_fraction

    cfg = config.load(run_dir / files.CONFIG)
    task = task_of(cfg.task)
    torch.manual_seed(cfg.run.seed)
    if cfg.run.num_threads > 0:
        torch.set_num_threads(cfg.run.num_threads)
    device = torch.device("cuda" if cfg.run.device != "cpu" and torch.cuda.is_available() else "cpu")
    splits = task.load(cfg.task.data_dir or None, seed=cfg.run.seed, resample=cfg.task.resample_splits)
    pretraining = stage == "pretrain"
    train_split = train_fraction(splits["train"], cfg.task.train_fraction)
    max_steps = stage_steps(cfg.optim.max_steps, cfg.optim.epochs, cfg.optim.batch_size, len(train_split))
    # The model and its FLOPs as run_stage counts them; its weights come from best.pt below.
    model, cost = train.stage_model(cfg, task, stage, train_split)
    model.to(device)
    best_path, last_path = run_dir / files.BEST, run_dir / files.LAST
    checkpoints.load_into(model, checkpoints.load(best_path, device, keys=("model",), fix=train.RESTART_FIX)["model"],
                          best_path, train.RESTART_FIX)
    state = checkpoints.load(last_path, keys=("state",), fix=train.RESTART_FIX)["state"]
    test = train.evaluate(model, cfg, task, stage, splits["test"], device, cfg.task.max_test_examples,
                          keep_hits=not pretraining)
    train.count_eval(state, test)  # the test pass is part of the trial's cost, as for a completed trial
    result: dict[str, Any] = {"stage": stage, "task": task.name, "model": cfg.model.name, "run_dir": str(run_dir),
                              "metric": train.stage_metric_name(cfg.objective, task, stage),
                              "n_params": count_parameters(model),
                              "init_from": None, **train.test_entries(test)}
    return train.finish(result, state, cost, world, run_dir, max_steps, status=STATUS)


def test_on_worker(spec: Any, crashed: frozenset[str]) -> Any:
    """test_stopped for the stage of `spec` as a Ray task on a trial node, never in the driver; returns its
    ObjectRef (see `ended`).

    The task reserves no CPU or GPU: with reuse_actors, Tune keeps the actors of ended trials, and their
    resources, for the trials still to come, so a task asking for a trial's share would wait for a slot that
    never frees while the stage it closes is unfinished. It runs instead on a node that has trial resources
    (a worker node of cluster.yaml; the head, which has none, only when it is the one node) and, in a GPU
    study, sees that node's GPUs: stopped trials are tested on the device and in the precision they trained
    in, beside the running trials, for the seconds one test pass takes."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    # A task's runtime_env adds to the job's (its plugins' modules stay): here, the node's GPUs left visible.
    gpus = {"runtime_env": {"env_vars": {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}}} \
        if spec.gpus_per_worker else {}
    task = ray.remote(test_stopped).options(
        num_cpus=0, name=f"test stopped {spec.stage} trials", max_retries=3, **gpus,
        scheduling_strategy=NodeAffinitySchedulingStrategy(trial_node(bool(spec.gpus_per_worker)), soft=True))
    return task.remote(spec.study_dir, spec.stage, crashed)


def trial_node(gpu: bool) -> str:
    """An alive node with the resources trials ask for (a GPU in a GPU study), other than the driver's where
    there is one."""
    import ray

    kind = "GPU" if gpu else "CPU"
    driver = ray.get_runtime_context().get_node_id()
    nodes = sorted((node["NodeID"] != driver, node["NodeID"]) for node in ray.nodes()
                   if node["Alive"] and node["Resources"].get(kind, 0) > 0)
    return nodes[-1][1] if nodes else driver


def ended(tasks: dict[str, Any]) -> list[tuple[str, str | None]]:
    """Of `tasks` ({name: ObjectRef of test_on_worker}), those that ended: (name, None) or (name, its error)."""
    import ray

    if not tasks:
        return []
    names = {ref: name for name, ref in tasks.items()}
    ready, _ = ray.wait(list(names), num_returns=len(names), timeout=0)
    done = []
    for ref in ready:
        try:
            ray.get(ref)
            done.append((names[ref], None))
        except Exception as exc:  # noqa: BLE001 - the engine fails the cell and goes on
            done.append((names[ref], f"{type(exc).__name__}: {exc}"))
    return done
