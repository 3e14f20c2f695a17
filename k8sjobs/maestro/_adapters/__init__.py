"""Modules that maestrowf's adapter scan loads (see k8sjobs.maestro._hook); nothing else."""
