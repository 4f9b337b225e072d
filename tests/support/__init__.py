"""Helpers shared by test directories (a conftest.py serves only its own directory's tests)."""
