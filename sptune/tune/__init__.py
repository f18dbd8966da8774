"""The Ray layer: a thin shell over the plain stage functions of `sptune.train`.

    session.py     the one way to start, join and clean up Ray (every entry point goes through it)
    options.py     the one option set and flag vocabulary of a search (`sptune study`, the experiment scripts)
    trainable.py   one trial = one stage run, directly in the Tune trial or under Ray Train's TorchTrainer
    search.py      search-space files -> Optuna searcher (+ ASHA) for Ray Tune
    studies.py    the study: pretraining search -> finetuning from the best trial, scratch baseline; resume
    results.py     results.csv of a study or an experiment (one schema), the selected trial, the summary
    boundary.py    the warning when a selected value sits at the edge of its searched grid
    curves.py      learning curves (validation vs step and vs training FLOPs) of the selected trials
    cli.py         `sptune study | resume | results`

Nothing here trains: every number comes from `sptune.train.run_stage`, so a study's trial and a
plain `sptune pretrain` run with the same config produce the same result.
"""

import os

# The study log (sptune.output) keeps every line the trials print: Ray's driver would fold lines it
# takes for repeats across workers ("[repeated 2x across cluster]"). Ray reads this when first imported,
# which is after this (every module here that imports Ray is in this package).
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # plain text in the log: no ANSI colors around "(pid=...)"
