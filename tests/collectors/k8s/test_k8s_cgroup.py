"""/proc/PID/cgroup parsing: every documented path form gives the right pod
UID, container id, runtime and Slurm job id; bad lines are skipped and counted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collectors.k8s.cgroup import Identity, parse_cgroup, path_identity

TD = Path(__file__).parents[3] / "collectors/k8s/testdata/cgroup"
UID = "0d8e7a5c-2b1f-4c3d-9e8f-7a6b5c4d3e2f"
CID = "3f8a1b2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8"

EXPECTED = {
    "containerd_systemd_v2_synthetic.txt": Identity(UID, CID, "containerd", None),
    "containerd_cgroupfs_v1_synthetic.txt": Identity(UID, CID, "cgroupfs", None),
    "crio_systemd_v2_synthetic.txt": Identity(UID, CID, "cri-o", None),
    "crio_conmon_v2_synthetic.txt": Identity(UID, None, "cri-o", None),
    "docker_systemd_v2_synthetic.txt": Identity(None, CID, "docker", None),
    "docker_cgroupfs_v1_synthetic.txt": Identity(None, CID, "docker", None),
    "dockershim_systemd_v1_synthetic.txt": Identity(UID, CID, "docker", None),
    "slurm_v1_synthetic.txt": Identity(None, None, None, "280678"),
    "slurm_v2_synthetic.txt": Identity(None, None, None, "1392969"),
    "slurm_v2_multi_slurmd_synthetic.txt": Identity(None, None, None, "77"),
    "host_session_v2_synthetic.txt": Identity(),
    "malformed_synthetic.txt": Identity(UID, CID, "containerd", None),
}


def test_every_fixture_has_an_expectation() -> None:
    """No fixture goes untested (and no expectation names a missing file)."""
    assert sorted(p.name for p in TD.glob("*.txt")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_documented_form_gives_identity(name: str) -> None:
    """Each documented path form yields exactly the expected identity."""
    assert parse_cgroup((TD / name).read_text(), name).identity == EXPECTED[name]


def test_malformed_lines_are_skipped_and_counted_by_reason() -> None:
    """Three bad lines: one of each reason, each message naming file:line; the
    good line still gives the identity."""
    p = parse_cgroup((TD / "malformed_synthetic.txt").read_text(), "m.txt")
    assert dict(p.drops) == {"bad_line": 1, "bad_hierarchy_id": 1, "bad_path": 1}
    assert [e.split(":")[1] for e in p.errors] == ["1", "2", "3"]
    assert all(e.startswith("m.txt:") for e in p.errors)


def test_v2_line_wins_over_v1_lines() -> None:
    """Hybrid host: the unified line is used when it names a container."""
    text = (f"4:memory:/docker/{'a' * 64}\n"
            f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/"
            f"cri-containerd-{CID}.scope\n")
    assert parse_cgroup(text).identity == Identity(UID, CID, "containerd", None)


def test_job_segment_outside_slurm_is_not_a_job() -> None:
    """A directory named job_5 that is not under Slurm's hierarchy gives nothing."""
    assert path_identity("/user.slice/job_5/step_0") == Identity()


def test_short_or_upper_case_ids_are_not_container_ids() -> None:
    """Container ids are 64 lower-case hex; anything else is ignored."""
    assert path_identity("/system.slice/docker-abc123.scope") == Identity()
    assert path_identity(f"/system.slice/docker-{CID.upper()}.scope") == Identity()


def test_this_process_parses_without_drops() -> None:
    """The live /proc/self/cgroup of this machine parses with no drops."""
    p = parse_cgroup(Path(f"/proc/{os.getpid()}/cgroup").read_text())
    assert not p.drops and p.paths
