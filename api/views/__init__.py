"""The REST API under /api/v1/ (HackSoft style), one module per resource: one APIView per
operation, `<Entity><Action>Api`, with nested Input/Output serializers; services and selectors
do the work. Names follow Kueue (camelCase fields, Kubernetes resource names and quantities;
shared/reference/wire-formats.md §6).

Tenants (bearer token) see and touch only their own workloads: another tenant's workload is a 404,
exactly like a missing one. Admins (staff session or token) manage tenants, queues and nodes.
Errors are {"message", "extra"} (api/exceptions.py); invalid input is a 400 naming each field.

Where two operations share a path (list and create), a small routing class combines the two
operation classes; the operations stay separate.
"""
