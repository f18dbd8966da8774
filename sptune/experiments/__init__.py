"""The paper's experiments as reproducible grids of cells (scripts in studies/, one per table or figure).

Words: a *study* is one `sptune study` (three searched stages, sptune.tune.records.studies); an *experiment*
is one of the paper's tables or figures, made of *cells*; a cell is one study (tune backend) or one
plain run per stage (plain backend).

    paper.py           the paper's numbers (Tables 1-9) and hyper-parameters (RECIPES), with provenance
    paper_files.py     configs/ and search_spaces/ generated from paper.RECIPES
    settings.py        the paper's recipes as config overrides and search spaces; the smoke-test scale
    sizing.py          width / depth for a parameter budget (Appendix E)
    kernel_analysis.py K_max(l) of SSM kernels (§3.6)
    plan.py            cells and plans (plan.json), the cells' search spaces
    run.py             the backends (tune: a study per cell; plain: run_stage) and the loop over cells; resume
    report.py, figures.py  results.csv, summary.csv, table.md and PNGs of an experiment directory
    (the scripts' command line, `main`, and `sptune report <dir>`: sptune.experiments_cli)
"""
