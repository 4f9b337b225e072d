from django.urls import path

from kube import views

urlpatterns = [
    path("filter", views.filter_view, name="extender-filter"),
    path("prioritize", views.prioritize_view, name="extender-prioritize"),
    path("bind", views.bind_view, name="extender-bind"),
]
