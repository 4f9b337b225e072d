"""The embedded simulated cluster: node pools built from real server topologies and synthetic
workloads. Pure Python (no Django) so the benchmarks and the replay can use it directly."""
