"""The one Ray driver: the cells in memory, the one Tune run over every cell's trials, the per-(cell, stage)
searcher and scheduler routing, signals, node losses and the mirror to durable storage."""
