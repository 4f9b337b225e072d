"""Debian packages' binaries that some tests drive (scripts/test.sh installs them when it can)."""

from __future__ import annotations

import shutil

import pytest


def installed(binary: str, package: str = "") -> str:
    """The path of a Debian package's binary (the package of the same name unless given); the
    test skips without it."""
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} is not installed (Debian package {package or binary})")
    return path
