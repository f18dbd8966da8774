"""Loaded by every Python process of a walk (tools/config_walk/walk.py puts this folder on PYTHONPATH): the
driver and each Ray worker record, once per function, every call into sptune whose arguments carry the config."""

import os
import sys
import threading

# Only the processes that can run sptune are traced: the walk's driver (`python -c`) and Ray's task workers.
# Ray's own Python daemons (dashboard, agents, log monitor) never call sptune: tracing their event loops
# would only cost CPU.
_RUNS_SPTUNE = sys.orig_argv[1:2] == ["-c"] or any(a.endswith("default_worker.py") for a in sys.orig_argv)

if os.environ.get("CONFIG_WALK_OUT") and _RUNS_SPTUNE:
    _OUT = os.path.join(os.environ["CONFIG_WALK_OUT"], f"trace-{os.getpid()}.tsv")
    _ROOT = os.environ["CONFIG_WALK_ROOT"]  # the sptune package folder walked
    _CONFIG = os.environ["CONFIG_WALK_CONFIG"]  # the config file as run_study was given it
    _CARRIERS = ("Config", "StudyState", "TrialSpec")  # sptune types that hold a study's config
    _seen: set = set()

    def _carries(value, depth=0):
        if type(value).__name__ in _CARRIERS and type(value).__module__.startswith("sptune"):
            return True
        if isinstance(value, (str, os.PathLike)):
            return str(value) == _CONFIG
        if isinstance(value, dict) and depth < 2:  # a resolved config dict, or a trial config holding one
            return {"task", "model", "optim"} <= set(value) or any(_carries(v, depth + 1) for v in value.values())
        if isinstance(value, (list, tuple)) and depth < 2:
            return any(_carries(v, depth + 1) for v in value)
        return False

    def _on_call(frame, event, arg):
        """The global trace function: called at each Python frame's start (no C calls, unlike a profiler's),
        and returning None so that no frame is traced line by line."""
        code = frame.f_code
        if not code.co_filename.startswith(_ROOT):
            return
        key = (code.co_filename, code.co_firstlineno)
        if key in _seen:
            return
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        try:
            carried = any(_carries(frame.f_locals.get(name)) for name in names)
        except Exception:  # an argument whose comparison raises is not the config
            carried = False
        if carried:
            _seen.add(key)
            with open(_OUT, "a") as out:
                out.write(f"{os.path.relpath(code.co_filename, _ROOT)}\t{code.co_name}\n")

    sys.settrace(_on_call)
    threading.settrace(_on_call)
