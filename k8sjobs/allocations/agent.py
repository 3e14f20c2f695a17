"""Placeholder for the in-pod agent (written by another helper; replaced at merge)."""
