"""The search spaces, search_spaces/<task>/<model>.yaml: package data, installed as sptune.search_spaces.

This file makes the directory a regular package so that both a wheel and an editable install import it
under that name (pyproject.toml maps it); sptune.search.spaces.default_path reads the files through
importlib.resources. Nothing else lives here.
"""
