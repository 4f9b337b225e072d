from django.urls import path

from dashboard import actions, views
from dashboard.signin import answers_429_when_throttled

app_name = "dashboard"

urlpatterns = [
    path("", views.cluster, name="cluster"),
    path("placements/", views.placements, name="placements"),
    path("queues/", views.queues, name="queues"),
    path("tenants/", views.tenants, name="tenants"),
    path("nodes/<str:name>/", views.node, name="node"),
    path("decisions/<int:pk>.json", views.decision, name="decision"),
    path("nodes/<str:name>/cordon/", actions.node_cordon, name="node-cordon"),
    path("nodes/<str:name>/drain/", actions.node_drain, name="node-drain"),
    path("tenants/<str:name>/quota/", actions.tenant_quota, name="tenant-quota"),
    path("workloads/<uuid:uid>/cancel/", actions.workload_cancel, name="workload-cancel"),
    path("login/", answers_429_when_throttled(views.LoginView.as_view()), name="login"),
    path("logout/", views.logout, name="logout"),
]
