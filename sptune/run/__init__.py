"""One stage trained once, without Ray: `train.run_stage` (pretrain, finetune or scratch) over the data batches
(`data`), the denoising objectives (`objectives`), checkpoints and the run directory (`runs`, `fingerprint`).
Every number a study reports comes from here, so a study's trial and a plain `sptune pretrain` run with the same
config produce the same result."""
