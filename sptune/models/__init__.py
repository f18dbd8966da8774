"""Sequence models: the Transformer attention layer, state space layers and the shared backbone."""
