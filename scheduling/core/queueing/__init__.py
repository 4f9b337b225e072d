"""Queues, quotas, fair sharing and quota preemption with Kueue's semantics and names (admission
before placement). Pure: no Django; the shell (scheduling.cycle / services / selectors) feeds it
rows and writes back what it decides.

- resources: canonical units and how a pod's request is counted against quota;
- config: ResourceFlavor, ClusterQueue, LocalQueue, PriorityClass (Kueue-shaped YAML documents);
- quota: the quota book (usage per cluster queue, flavor and resource), borrowing and lending
  limits, Kueue's dominant resource share;
- preemption: who may preempt whom, and minimal victim sets for quota;
- admission: one admission cycle (flavor assignment, ordering, StrictFIFO/BestEffortFIFO);
- batch: placing a batch of pods with gangs all or nothing, and why pods wait;
- gang_reclaim: topology-aware reclaim of nodes for a gang admitted within its quota;
- estimate: estimated start times from running workloads' expected ends.
"""
