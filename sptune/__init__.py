"""sptune: self-pretraining (SPT) as the standard way to evaluate long-sequence models.

Amos, Berant, Gupta. "Never Train from Scratch: Fair Comparison of Long-Sequence Models
Requires Data-Driven Priors." ICLR 2024.
"""

__version__ = "0.1.0"
