"""The tests' password hasher: Django's PBKDF2 at a thousandth of its iterations."""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FewIterationsPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """Django's default at 1,000,000 iterations costs half a second of CPU per password set or
    checked, and a few hundred test accounts are made or signed in per run. The algorithm's name
    is the default's, and a hash carries its iteration count, so the web processes the tests start
    with the production settings still check these passwords (and store them again at full cost
    on a sign-in, as they would any older hash)."""

    iterations = 1000
