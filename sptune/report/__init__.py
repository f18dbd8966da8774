"""What a reader sees, written for any results folder by one writer (`writer`): statistics (paired intervals,
power, sequential looks, the data multiplier), an experiment's tables and figures, learning curves and Optuna's
plots, the checks under a table, pooled batches of seeds."""
