import copy
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from tests.api.conftest import LLAMA, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def rates(**changes: str) -> dict[str, Any]:
    config: dict[str, Any] = copy.deepcopy(dict(settings.REST_FRAMEWORK))
    config["DEFAULT_THROTTLE_RATES"].update(changes)
    return config


def test_requests_over_the_rate_get_429(team_a, team_b) -> None:
    with override_settings(REST_FRAMEWORK=rates(api="3/min")):
        codes = [team_a.client.get("/api/v1/workloads").status_code for _ in range(4)]
        assert codes == [200, 200, 200, 429]
        response = team_a.client.get("/api/v1/workloads")
        assert response.status_code == 429
        assert int(response.headers["Retry-After"]) > 0
        assert response.json()["extra"]["retryAfterSeconds"] > 0
        assert "throttled" in response.json()["message"].lower()
        # Per tenant: another tenant is not slowed down.
        assert team_b.client.get("/api/v1/workloads").status_code == 200


def test_submits_have_their_own_rate(team_a, cluster) -> None:
    with override_settings(REST_FRAMEWORK=rates(submit="1/min")):
        first = copy.deepcopy(LLAMA)
        second = copy.deepcopy(LLAMA)
        second["name"] = "second"
        assert submit(team_a, first).status_code == 201
        assert submit(team_a, second).status_code == 429
        assert team_a.client.get("/api/v1/workloads").status_code == 200


def test_anonymous_clients_are_throttled(db: None) -> None:
    from rest_framework.test import APIClient

    with override_settings(REST_FRAMEWORK=rates(anon="2/min")):
        client = APIClient()
        codes = [client.get("/api/schema/").status_code for _ in range(3)]
        assert codes == [200, 200, 429]


@pytest.mark.parametrize("authorization", [None, "Bearer not-a-token"])
def test_refused_credentials_are_throttled_at_the_anonymous_rate(
    db: None, authorization: str | None
) -> None:
    from rest_framework.test import APIClient

    with override_settings(REST_FRAMEWORK=rates(anon="2/min")):
        client = APIClient()
        if authorization:
            client.credentials(HTTP_AUTHORIZATION=authorization)
        codes = [client.get("/api/v1/workloads").status_code for _ in range(3)]
        assert codes == [401, 401, 429]
