from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from dashboard import signin
from gpusched import views
from kube.views import mutate_job_view

# The admin's sign-in is throttled like the dashboard's (dashboard/signin.py).
admin.site.login_form = signin.AdminSignInForm
admin.site.login = signin.answers_429_when_throttled(admin.site.login)  # type: ignore[method-assign,assignment]

urlpatterns = [
    # The home page is the live dashboard (Cluster view); it asks admins to sign in first.
    path("", include("dashboard.urls")),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    # Swagger UI's script from a URL of its own: the Content-Security-Policy allows no inline one.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("extender/", include("kube.urls")),  # kube-scheduler extender v1 (kube/extender.py)
    # Kueue's job webhook's defaulting: Jobs naming a queue are created suspended (kube/webhook.py)
    path("webhooks/mutate-batch-v1-job", mutate_job_view, name="webhook-mutate-job"),
]

# Unknown paths, refused requests and crashes: the API's error shape under /api/, the
# dashboard's pages elsewhere.
handler400 = "gpusched.error_pages.bad_request"
handler404 = "gpusched.error_pages.not_found"
handler500 = "gpusched.error_pages.server_error"
