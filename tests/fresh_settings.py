"""Settings as a fresh interpreter reads them: they read the environment once, at import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`code` in a new interpreter with the project's settings and `env` (the caller's database
    settings left out, so each case names its own)."""
    scrubbed = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPUSCHED_DB_") and k != "DATABASE_URL"
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**scrubbed, "DJANGO_SETTINGS_MODULE": "gpusched.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
