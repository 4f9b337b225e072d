"""Scheduler profiles shipped with gpusched (scheduling/profiles/*.yaml), by name or path."""

from __future__ import annotations

from pathlib import Path

from scheduling.core.plugin_args import ProfileError
from scheduling.core.profiles import Profile, load_profiles

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


def available() -> list[str]:
    return sorted(path.stem for path in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> Profile:
    """The first profile of a shipped file (`gpusched`, `fgd`, ...) or of a YAML file on disk."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ProfileError(f"no profile {name_or_path!r} (shipped: {', '.join(available())})")
    return load_profiles(path.read_text())[0]
