"""Experiment trackers for a study's trials: TensorBoard (always), W&B and MLflow through Ray Tune's callbacks."""
