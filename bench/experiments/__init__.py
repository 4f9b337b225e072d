"""Experiments that drive the pure core on recorded traces (no database), run by
`manage.py experiment NAME`."""
