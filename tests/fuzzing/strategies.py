"""Hypothesis strategies and the CI settings for the parser fuzz tests.

:func:`check_parser` draws cases of one :class:`~tests.fuzzing.targets.Target` (a real
seed file, structure-aware edits, byte/line ops: :func:`tests.fuzzing.targets.build_case`,
so a failing example prints as ``(seed index, edit seeds, plan)`` and shrinks to the
fewest ops) and checks the contract of :func:`tests.fuzzing.targets.run_case`.

:data:`CI` is the budget the test suite runs: ``max_examples`` per parser (200, or
``AACO_FUZZ_EXAMPLES``), ``derandomize=True`` (the same cases every run), no deadline
and no example database, so CI is deterministic. ``benchmarks/fuzz_parsers.py`` runs
the same targets at 100,000 cases per parser.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from tests.fuzzing import mutate as M
from tests.fuzzing.targets import Outcome, Target, build_case, run_case

CI = settings(
    max_examples=int(os.environ.get("AACO_FUZZ_EXAMPLES", "200")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Settings of every ``test_fuzz_*`` test (see the module doc)."""

_U32 = st.integers(0, 2**32 - 1)
_PLAN = st.lists(st.tuples(st.sampled_from(sorted(M.BYTE_OPS)), _U32), max_size=4)
_REASON = re.compile(r"[a-z][a-z0-9_]{0,39}|\(top level\)")


def case_args(target: Target, work: Path) -> st.SearchStrategy[tuple[int, list[int], M.Plan]]:
    """``(seed index, structure-aware edit seeds, byte-op plan)`` for ``target``."""
    n = len(target.seed_list(work))
    edits = st.lists(_U32, max_size=3) if target.structured is not None else st.just([])
    return st.tuples(st.integers(0, n - 1), edits, _PLAN)


def check_parser(target: Target, work: Path, data: st.DataObject) -> Outcome:
    """Draw one case of ``target`` and run it: the parser must return (drops counted
    by bounded reason tokens) or reject with its documented error (a bounded reason);
    any other exception propagates and fails the test with the drawn case."""
    idx, edits, plan = data.draw(case_args(target, work), label="case")
    seed, raw = build_case(target, work, idx, edits, plan)
    out = run_case(target, seed, raw, work)
    if out.rejected:
        assert out.reason is not None and _REASON.fullmatch(out.reason), out.reason
    for reason, n in out.drops.items():
        assert _REASON.fullmatch(reason), reason
        assert n > 0, (reason, n)
    return out
