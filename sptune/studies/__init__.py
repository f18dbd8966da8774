"""The paper's studies as reproducible grids (scripts in studies/, one per table or figure).

    paper.py           the paper's numbers (Tables 1-9) and hyper-parameters (RECIPES), with provenance
    paper_files.py     configs/ and search_spaces/ generated from paper.RECIPES
    settings.py        the paper's recipes as config overrides and search spaces; the smoke-test scale
    sizing.py          width / depth for a parameter budget (Appendix E)
    kernel_analysis.py K_max(l) of SSM kernels (§3.6)
    runner.py          cells -> Ray Tune pipeline (sptune.tune) or plain run_stage; resume
    report.py, plots.py  results.csv, summary.csv, table.md and PNGs of a study directory
    cli.py             `sptune report <study dir>`
"""
