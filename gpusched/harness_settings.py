"""The project's settings with the harness installed (GPUSCHED_HARNESS: the simulator and the
benchmarks), for the tools that read settings before anything of ours could set the variable:
pytest (pytest-django imports the settings before any conftest) and mypy's Django plugin. The
variable is set for the whole process, so the processes the tests start have the harness too."""

import os

os.environ["GPUSCHED_HARNESS"] = "1"

from gpusched.settings import *  # noqa: E402, F403
