"""The command lines: `sptune ...` (`main`), its subcommands (`data`, `study`, `power`) and the experiment scripts'
`main` (`experiment`). Each parses flags, calls the API and prints."""
