"""sptune: self-pretraining (SPT) as the standard way to evaluate long-sequence models.

Amos, Berant, Gupta. "Never Train from Scratch: Fair Comparison of Long-Sequence Models
Requires Data-Driven Priors." ICLR 2024.

The Python API (sptune.api; imported on first use, so `import sptune` stays light):
run_study, resume_study, load_results, load_history, and evaluate (a researcher's layer against the
baselines, scratch and self-pretrained). register_model / register_task name code from outside sptune
(sptune.plugins).
"""

import os

from sptune import cpu_kernels

# A study's log (sptune.output) keeps every line the trials print: Ray's driver would fold lines it takes for
# repeats across workers ("[repeated 2x across cluster]"). Ray reads these when first imported, which is after
# this (every module that imports Ray is in this package).
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_COLOR_PREFIX", "0")  # plain text in the log: no ANSI colors around "(pid=...)"

cpu_kernels.pin()  # before any model runs: oneDNN's kernels the same on every x86 CPU with AVX2 (sptune.cpu_kernels)

__version__ = "0.1.0"
__all__ = ["run_study", "resume_study", "load_results", "load_history", "evaluate", "register_model",
           "register_task"]
PLUGINS = ("register_model", "register_task")


def __getattr__(name: str):
    if name in PLUGINS:
        from sptune import plugins

        return getattr(plugins, name)
    if name in __all__:
        from sptune import api

        return getattr(api, name)
    raise AttributeError(f"module 'sptune' has no attribute {name!r}")
