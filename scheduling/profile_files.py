"""Scheduler profiles shipped with gpusched (scheduling/profiles/*.yaml), by name or path."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from scheduling.core.plugin_args import ProfileError
from scheduling.core.profiles import Profile, load_profiles

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"


def available() -> list[str]:
    return sorted(path.stem for path in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str) -> Profile:
    """The first profile of a shipped file (`gpusched`, `fgd`, ...) or of a YAML file on disk.
    ProfileError names the file and the offending key."""
    path = Path(name_or_path)
    if not path.suffix:
        path = PROFILE_DIR / f"{name_or_path}.yaml"
    if not path.is_file():
        raise ProfileError(f"no profile {name_or_path!r} (shipped: {', '.join(available())})")
    try:
        return load_profiles(path.read_text())[0]
    except (OSError, UnicodeDecodeError, ProfileError) as exc:
        raise ProfileError(f"profile {path}: {exc}") from exc


def command_profile(name_or_path: str) -> Profile:
    """load_profile() for a management command: a bad profile ends it with its message (the file
    and the key), not a traceback."""
    try:
        return load_profile(name_or_path)
    except ProfileError as exc:
        raise CommandError(str(exc)) from exc
