"""`manage.py check --deploy` in a production environment: clean as configured, and every setting
relaxed through the environment shows up again as its warning (nothing is silenced)."""

from __future__ import annotations

import pytest

from tests.security.production import manage, production_env


def deploy_check(**variables: str) -> tuple[int, str]:
    result = manage("check", "--deploy", "--fail-level", "WARNING", env=production_env(**variables))
    return result.returncode, result.stdout + result.stderr


def test_production_settings_pass_the_deploy_check() -> None:
    code, output = deploy_check()
    assert code == 0, output
    assert "no issues (0 silenced)" in output


# Two runs, not one per setting: the HSTS flags are only checked while HSTS is on.
@pytest.mark.parametrize(
    ("variables", "warnings"),
    [
        (
            {
                "GPUSCHED_SECURE_SSL_REDIRECT": "0",
                "GPUSCHED_HSTS_INCLUDE_SUBDOMAINS": "0",
                "GPUSCHED_HSTS_PRELOAD": "0",
                "GPUSCHED_SECRET_KEY": "short",
            },
            ["security.W008", "security.W005", "security.W021", "security.W009"],
        ),
        (
            {"GPUSCHED_HSTS_SECONDS": "0", "GPUSCHED_SECRET_KEY": "", "GPUSCHED_DEBUG": "1"},
            ["security.W004", "security.W009", "security.W018"],
        ),
    ],
    ids=["https-and-key", "hsts-key-and-debug"],
)
def test_relaxed_settings_are_reported(variables: dict[str, str], warnings: list[str]) -> None:
    code, output = deploy_check(**variables)
    assert code != 0
    for warning in warnings:
        assert warning in output, output
