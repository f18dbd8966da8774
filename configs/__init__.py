"""The configs, configs/<task>_<model>.yaml: package data, installed as sptune.configs, so library code
(sptune.experiment.settings) reads them from a wheel as from a checkout (pyproject.toml maps the directory;
importlib.resources reads it). Nothing else lives here."""
