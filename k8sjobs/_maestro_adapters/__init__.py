"""Modules that maestrowf's adapter scan loads (see k8sjobs._maestro_hook); nothing else."""
