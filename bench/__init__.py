"""Benchmarks run by `make bench`; every figure is reported as a ratio against a baseline in the same run."""
