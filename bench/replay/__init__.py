"""Trace replays: pure Python drivers of the scheduling core (no Django)."""
