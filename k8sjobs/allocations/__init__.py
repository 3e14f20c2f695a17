"""Allocations: pods held once for a study, into which many short steps are streamed."""
