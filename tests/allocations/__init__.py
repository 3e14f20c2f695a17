"""Tests of the allocation room: the agent as a real process, and its line protocol."""
