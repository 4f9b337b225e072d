"""Queues, quotas, fair sharing and quota preemption with Kueue's semantics and names (admission
before placement). Pure: no Django; the shell (scheduling.worker.cycle / services / selectors) feeds
it rows and writes back what it decides.

- resources: canonical units of any resource name and how a pod's request is counted;
- config: ResourceFlavor, ClusterQueue, Cohort, LocalQueue, PriorityClass, admission fair sharing
  settings, as the core reads them;
- kueue_objects (with kueue_fields): Kueue's objects, from YAML documents or the Kubernetes API,
  into a config; compatibility: every Kueue field and what gpusched does with it;
- quota: the quota book (usage per cluster queue, flavor and resource) over Kueue's cohort trees,
  borrowing and lending limits, Kueue's dominant resource share;
- fair_usage: admission fair sharing's decayed LocalQueue usage (Kueue's formulas);
- ordering: the order of one cluster queue's pending workloads;
- preemption: who may preempt whom, and minimal victim sets for quota;
- admission: one admission cycle (flavor assignment, the fair-sharing tournament, StrictFIFO /
  BestEffortFIFO, deactivation and stop policies);
- batch: placing a batch of pods with gangs all or nothing, and why pods wait;
- gang_reclaim: topology-aware reclaim of nodes for a gang admitted within its quota;
- estimate: estimated start times from running workloads' expected ends.
"""
