"""The worker's entry point of every trial of the engine's Tune run, whichever cell and stage it serves.

The driver resolves each cell's stages once per start and hands the trials their specs through
`tune.with_parameters` (Ray's object store): `specs` maps (study directory, stage) to that stage's TrialSpec.
A trial finds its own by the lineage entry of its Tune config; a finetuning trial takes its start, the
pretraining trial selected on validation, from that lineage too (the selection is made while the run goes on,
after the specs were handed out). So no trial opens study.json to learn what to train.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from sptune.trials import retries
from sptune.trials.trainable import LINEAGE_KEY, Trial, TrialSpec, searched, stage_trainable

Specs = dict[tuple[str, str], TrialSpec]  # (str(study directory), stage) -> the stage's spec, no start yet


def spec_of(specs: Specs, config: dict[str, Any]) -> TrialSpec:
    """The trial's spec: its stage's, with (finetuning) the selected pretraining trial it starts from."""
    lineage = config[LINEAGE_KEY]
    spec = specs[(lineage["study_dir"], lineage["stage"])]
    if "init_run_dir" not in lineage:
        return spec
    init = {"trial": lineage["init_trial"], "step": lineage["init_step"], "checkpoint": lineage["init_checkpoint"],
            "run_dir": lineage["init_run_dir"]}
    return dataclasses.replace(spec, init=init)


def run_trial(config: dict[str, Any], specs: Specs, stage_fn: Callable[[Trial], None] = stage_trainable) -> None:
    """A trial of any cell, run as its cell's study runs that stage (`stage_fn`: stage_trainable; a test may
    wrap it); a trial whose crashes spent its retries fails at once (sptune.trials.retries)."""
    from ray import tune

    trial = Trial(spec_of(specs, config), searched(config), tune.get_context().get_trial_id())
    retries.raise_if_spent(trial.run_dir)
    stage_fn(trial)
