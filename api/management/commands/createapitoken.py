"""createapitoken USERNAME [--name LABEL] [--json]: an API token for an admin (staff) user,
printed once; only its digest is stored."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser

from api import services


class Command(BaseCommand):
    help = "Create an API token for an admin (staff) user; the token is printed once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label for the token")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        user = User.objects.filter(username=options["username"]).first()
        if user is None:
            raise CommandError(f"no user {options['username']!r}")
        if not user.is_staff:
            raise CommandError(f"user {user.username!r} is not staff: admin tokens are for staff")
        _, token = services.token_create(user=user, name=options["name"])
        if options["json"]:
            self.stdout.write(json.dumps({"user": user.username, "token": token}))
        else:
            self.stdout.write(f"token (shown once): {token}")
