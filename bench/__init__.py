"""Benchmarks: `python -m bench.input_pipeline` and `python -m bench.make_run` (results in bench/results/)."""
