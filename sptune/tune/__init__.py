"""The Ray layer: searches and clusters around the plain stage functions of `sptune.train`, in three parts
(imports point from engine to records to trials; docs/architecture.md maps every file):

    trials/    one trial on a worker: its entry point, the stage run (directly or under Ray Train), retries,
               resources, failures, the test pass of trials ASHA stopped
    records/   the folders a run leaves, read and written without Tune's loop: study.json, results, storage
    engine/    the one Ray driver: the cells in memory, the one Tune run, its searcher, schedulers, signals

Nothing here trains: every number comes from `sptune.train.run_stage`, so a study's trial and a
plain `sptune pretrain` run with the same config produce the same result.
"""

import os

# The study log (sptune.output) keeps every line the trials print: Ray's driver would fold lines it
# takes for repeats across workers ("[repeated 2x across cluster]"). Ray reads this when first imported,
# which is after this (every module here that imports Ray is in this package).
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # plain text in the log: no ANSI colors around "(pid=...)"
