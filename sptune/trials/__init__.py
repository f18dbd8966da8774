"""One trial on a worker: its entry point (the spec the engine hands it), the stage run (directly or under Ray
Train), retries, resources, failures, and the test pass of trials ASHA stopped."""
