"""Only the extender routes, so these tests do not depend on the rest of the URL tree."""

from django.urls import include, path

urlpatterns = [path("extender/", include("kube.urls"))]
