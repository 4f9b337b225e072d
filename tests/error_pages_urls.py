"""gpusched's URLs plus two views that crash, one of them in the API's URL space."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from gpusched.urls import handler404, handler500, urlpatterns


def crash(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a bug")


urlpatterns = [
    path("api/v1/crash", crash),
    path("crash/", crash),
    *urlpatterns,
]
__all__ = ["handler404", "handler500", "urlpatterns"]
