"""Scheduler profiles shipped with gpusched (scheduling/profiles/*.yaml), by name or path.

A file may also be the ConfigMap that deploy/ mounts into the scheduler (`data: {profile.yaml:
...}`), so the profile an admin deployed is the profile the offline tools read.
"""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import CommandError

from scheduling.core import yaml_documents
from scheduling.core.plugin_args import ProfileError
from scheduling.core.profiles import Profile, load_profiles

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
CONFIG_MAP_KEY = "profile.yaml"
DEFAULT = "gpusched"  # what runscheduler runs unless told otherwise


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
        return load_profiles(_profile_text(path.read_text()))[0]
    except (OSError, UnicodeDecodeError, ProfileError) as exc:
        raise ProfileError(f"profile {path}: {exc}") from exc


def command_profile(name_or_path: str) -> Profile:
    """load_profile() for a management command: a bad profile ends it with its message (the file
    and the key), not a traceback."""
    try:
        return load_profile(name_or_path)
    except ProfileError as exc:
        raise CommandError(str(exc)) from exc


def _profile_text(text: str) -> str:
    try:
        doc = yaml_documents.load_one(text)
    except yaml_documents.YamlError:
        return text  # load_profiles names the YAML error
    if isinstance(doc, dict) and doc.get("kind") == "ConfigMap":
        data = doc.get("data") or {}
        if not isinstance(data, dict) or not isinstance(data.get(CONFIG_MAP_KEY), str):
            raise ProfileError(f"ConfigMap without data.{CONFIG_MAP_KEY!r}")
        return str(data[CONFIG_MAP_KEY])
    return text
