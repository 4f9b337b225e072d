"""A simulated Kubernetes: an API server with the real paths, JSON, resourceVersions, watches and
error codes (store, registry, controllers, HTTP), kubelets that run the pods bound to the nodes
of a simulator spec, and a dcgm-exporter labelling GPUs with the pods that hold them.
docs/kubernetes.md describes what it serves and what it does not simulate."""
