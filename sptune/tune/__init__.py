"""The Ray layer: a thin shell over the plain stage functions of `sptune.train`.

    trainable.py   one trial = one stage run, directly in the Tune trial or under Ray Train's TorchTrainer
    search.py      search-space files -> Optuna searcher (+ ASHA) for Ray Tune
    pipeline.py    the study: pretraining search -> finetuning from the best trial, scratch baseline; resume
    cli.py         `sptune study | resume | results`

Nothing here trains: every number comes from `sptune.train.run_stage`, so a study's trial and a
plain `sptune pretrain` run with the same config produce the same result.
"""
