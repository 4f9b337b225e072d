"""While the database restarts, the API says so in its error shape with a 503 and Retry-After
(tests/faults/test_postgres_restart.py runs the real outage)."""

from django.db import InterfaceError, OperationalError
from rest_framework.test import APIRequestFactory

from api.exceptions import exception_handler


def test_a_database_outage_is_a_503_to_retry_not_a_500() -> None:
    request = APIRequestFactory().get("/api/v1/workloads")
    for error in (OperationalError("server closed the connection"), InterfaceError("closed")):
        response = exception_handler(error, {"request": request})
        assert response is not None
        assert response.status_code == 503
        assert response["Retry-After"] == "5"
        assert response.data == {
            "message": "The database is unavailable; retry shortly.",
            "extra": {},
        }
