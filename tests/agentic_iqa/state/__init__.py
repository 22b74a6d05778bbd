"""Tests of the state models, their merge rules and their JSON round trip."""
