"""/api/v1/: the tenant API, and the admin API under admin/ (api/views/)."""

from django.urls import path

from api.views import nodes, queues, tenants, usage, workload_status, workloads

app_name = "api"

urlpatterns = [
    path("workloads", workloads.WorkloadsApi.as_view(), name="workloads"),
    path("workloads/<str:name>", workloads.WorkloadDetailApi.as_view(), name="workload"),
    path(
        "workloads/<str:name>/cancel", workloads.WorkloadCancelApi.as_view(), name="workload-cancel"
    ),
    path(
        "workloads/<str:name>/pods", workload_status.WorkloadPodsApi.as_view(), name="workload-pods"
    ),
    path(
        "workloads/<str:name>/placements",
        workload_status.WorkloadPlacementsApi.as_view(),
        name="workload-placements",
    ),
    path(
        "workloads/<str:name>/status",
        workload_status.WorkloadPendingStatusApi.as_view(),
        name="workload-status",
    ),
    path("quota", usage.TenantQuotaApi.as_view(), name="quota"),
    path("usage", usage.TenantUsageApi.as_view(), name="usage"),
    path("queues", queues.LocalQueueListApi.as_view(), name="queues"),
    path(
        "queues/<str:name>/pendingworkloads",
        queues.LocalQueuePendingWorkloadsApi.as_view(),
        name="queue-pending-workloads",
    ),
    path("flavors", queues.FlavorListApi.as_view(), name="flavors"),
    path("priorityclasses", queues.PriorityClassListApi.as_view(), name="priority-classes"),
    path("admin/tenants", tenants.TenantsApi.as_view(), name="admin-tenants"),
    path("admin/tenants/<str:name>", tenants.TenantDetailApi.as_view(), name="admin-tenant"),
    path(
        "admin/tenants/<str:name>/policy",
        tenants.TenantPolicyUpdateApi.as_view(),
        name="admin-tenant-policy",
    ),
    path(
        "admin/tenants/<str:name>/quota",
        tenants.TenantQuotaUpdateApi.as_view(),
        name="admin-tenant-quota",
    ),
    path(
        "admin/tenants/<str:name>/tokens",
        tenants.TenantTokensApi.as_view(),
        name="admin-tenant-tokens",
    ),
    path(
        "admin/tokens/<int:token_id>/revoke",
        tenants.TokenRevokeApi.as_view(),
        name="admin-token-revoke",
    ),
    path("admin/localqueues", queues.AdminLocalQueueListApi.as_view(), name="admin-local-queues"),
    path("admin/clusterqueues", queues.ClusterQueueListApi.as_view(), name="admin-cluster-queues"),
    path(
        "admin/clusterqueues/<str:name>/consolidation",
        queues.ClusterQueueConsolidationApi.as_view(),
        name="admin-cluster-queue-consolidation",
    ),
    path("admin/cohorts", queues.CohortListApi.as_view(), name="admin-cohorts"),
    path("admin/nodes", nodes.NodeListApi.as_view(), name="admin-nodes"),
    path("admin/nodes/<str:name>", nodes.NodeDetailApi.as_view(), name="admin-node"),
    path("admin/nodes/<str:name>/cordon", nodes.NodeCordonApi.as_view(), name="admin-node-cordon"),
    path(
        "admin/nodes/<str:name>/uncordon",
        nodes.NodeUncordonApi.as_view(),
        name="admin-node-uncordon",
    ),
    path("admin/nodes/<str:name>/drain", nodes.NodeDrainApi.as_view(), name="admin-node-drain"),
    path(
        "admin/nodeactions/<int:action_id>",
        nodes.NodeActionApi.as_view(),
        name="admin-node-action",
    ),
]
