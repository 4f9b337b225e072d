"""Benchmarks, experiments and the openb trace replay, with the harness that runs the whole stack
natively: everything that measures gpusched, kept out of the product apps."""
