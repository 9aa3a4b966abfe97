"""The sample runs (package data): real CPU runs made with the tracer, one folder per run."""
