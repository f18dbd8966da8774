"""The folders a run leaves, read and written without Tune's loop: study.json (`study_state`), a study's creation
(`studies`), trial rows and results tables, multi-seed studies, what a results folder is (`layout`), and durable
storage (`storage`)."""
