"""The node topology agent (`manage.py topologyagent`, a DaemonSet on GPU nodes): keeps the seeds'
annotation `gpu-topology.nvidia.com/info` of its own node equal to what `nvidia-smi` says."""
