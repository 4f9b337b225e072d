"""A production environment for subprocesses (debug off, a long random secret key, a real host name)
and `manage.py` run in it."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def production_env(**variables: str) -> dict[str, str]:
    """This process's environment without any gpusched setting of its own (a developer's
    GPUSCHED_DEBUG=1 must not leak in), production values, then `variables` over them."""
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("GPUSCHED_") and name not in {"DATABASE_URL", "REDIS_URL"}
    }
    return {
        **inherited,
        "GPUSCHED_DEBUG": "0",
        "GPUSCHED_SECRET_KEY": secrets.token_urlsafe(50),
        "GPUSCHED_ALLOWED_HOSTS": "gpusched.example.com",
        **variables,
    }


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
