"""Experiments: grids of cells run by one engine (`engine/`, one Tune run over every cell's trials).

Words: a *study* is one `sptune study` (three searched stages, sptune.records.studies); an *experiment*
is a set of *cells*, one of the paper's tables or figures, `sptune evaluate`'s model against the baselines, or
a study's seeds; a cell is one study (tune backend) or one plain run per stage (plain backend).

    plan.py            cells and plans (plan.json), the cells' search spaces
    backends.py        the backends (tune: every cell's trials in the engine; plain: run_stage) and the loop over
                       cells; resume
    evaluate.py        `sptune evaluate`: a model against the baselines, as cells of one experiment
    budget.py          `sptune plan`: trials, FLOPs and device-hours of a study or experiment, no training
    paper.py           the paper's numbers (Tables 1-9) and hyper-parameters (RECIPES), with provenance
    paper_files.py     configs/ and search_spaces/ generated from paper.RECIPES
    settings.py        the paper's recipes as config overrides and search spaces; the smoke-test scale
    sizing.py          width / depth for a parameter budget (Appendix E)
    endpoints.py, looks.py, pilots.py  a confirmation's declared endpoint, its looks, the pilots that size it
(tables and figures: sptune.report; the scripts' command line and `sptune report <dir>`: sptune.cli.experiment)
"""
