"""Simulated clusters for the demo, the tests, the benchmarks and the experiments: node pools built
from real server topologies, synthetic and trace-driven workloads, and the embedded cluster that
starts, runs and finishes pods with a utilization profile and renders dcgm-exporter metrics."""
