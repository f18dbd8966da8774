"""How a stage's grid is searched: search-space files (`spaces`, no Ray), what a search is asked for (`options`),
the Optuna searcher on its public ask/tell API (`searcher`) and where its journal lives (`journal`), grids that
extend themselves past an edge (`bracketing`, `boundary`)."""
