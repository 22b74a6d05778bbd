"""A worker's default Celery node name: its queues at its host, so two workers differ."""

from __future__ import annotations

import pytest

from agentic_iqa.cli.system import node_name


@pytest.mark.parametrize(
    ("queues", "name"),
    [
        ("default", "default@%h"),
        ("gpu", "gpu@%h"),
        ("vlm", "vlm@%h"),
        ("default,vlm,gpu", "default+vlm+gpu@%h"),
        (" default , gpu ,", "default+gpu@%h"),  # spaces and an empty entry dropped
        ("tools/v2", "tools_v2@%h"),  # no character a node name should not hold
        ("a@b", "a_b@%h"),  # an @ would split the name from its host
        ("", "worker@%h"),
    ],
)
def test_the_default_name_is_made_of_the_queues_and_the_host(queues: str, name: str) -> None:
    assert node_name(queues) == name


def test_workers_of_different_queues_never_share_a_default_name() -> None:
    names = {node_name(q) for q in ("default", "gpu", "vlm", "default,gpu", "gpu,default")}
    assert len(names) == 5
