"""gpusched's settings with a 4-second telemetry freshness window, for processes of the fault tests
that must see telemetry go stale within a test (the production default is 60 s)."""

from gpusched.settings import *  # noqa: F403

TELEMETRY_FRESHNESS_SECONDS = 4.0
