"""/api/v1/: the tenant API, and the admin API under admin/ (scheduling/apis.py)."""

from django.urls import path

from scheduling import apis

app_name = "api"

urlpatterns = [
    path("workloads", apis.WorkloadsApi.as_view(), name="workloads"),
    path("workloads/<str:name>", apis.WorkloadDetailApi.as_view(), name="workload"),
    path("workloads/<str:name>/cancel", apis.WorkloadCancelApi.as_view(), name="workload-cancel"),
    path("workloads/<str:name>/pods", apis.WorkloadPodsApi.as_view(), name="workload-pods"),
    path(
        "workloads/<str:name>/placements",
        apis.WorkloadPlacementsApi.as_view(),
        name="workload-placements",
    ),
    path(
        "workloads/<str:name>/status",
        apis.WorkloadPendingStatusApi.as_view(),
        name="workload-status",
    ),
    path("quota", apis.TenantQuotaApi.as_view(), name="quota"),
    path("usage", apis.TenantUsageApi.as_view(), name="usage"),
    path("queues", apis.LocalQueueListApi.as_view(), name="queues"),
    path("flavors", apis.FlavorListApi.as_view(), name="flavors"),
    path("priorityclasses", apis.PriorityClassListApi.as_view(), name="priority-classes"),
    path("admin/tenants", apis.TenantsApi.as_view(), name="admin-tenants"),
    path("admin/tenants/<str:name>", apis.TenantDetailApi.as_view(), name="admin-tenant"),
    path(
        "admin/tenants/<str:name>/policy",
        apis.TenantPolicyUpdateApi.as_view(),
        name="admin-tenant-policy",
    ),
    path(
        "admin/tenants/<str:name>/tokens",
        apis.TenantTokensApi.as_view(),
        name="admin-tenant-tokens",
    ),
    path(
        "admin/tokens/<int:token_id>/revoke",
        apis.TokenRevokeApi.as_view(),
        name="admin-token-revoke",
    ),
    path("admin/localqueues", apis.AdminLocalQueueListApi.as_view(), name="admin-local-queues"),
    path("admin/clusterqueues", apis.ClusterQueueListApi.as_view(), name="admin-cluster-queues"),
    path("admin/nodes", apis.NodeListApi.as_view(), name="admin-nodes"),
    path("admin/nodes/<str:name>", apis.NodeDetailApi.as_view(), name="admin-node"),
    path("admin/nodes/<str:name>/cordon", apis.NodeCordonApi.as_view(), name="admin-node-cordon"),
    path(
        "admin/nodes/<str:name>/uncordon",
        apis.NodeUncordonApi.as_view(),
        name="admin-node-uncordon",
    ),
    path("admin/nodes/<str:name>/drain", apis.NodeDrainApi.as_view(), name="admin-node-drain"),
]
