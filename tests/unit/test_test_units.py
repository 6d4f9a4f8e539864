"""How tests/scheduling.py cuts the suite into units of work for the xdist workers."""

from __future__ import annotations

from typing import Any

from tests import scheduling
from tests.scheduling import LongestFileFirst, unit_of


def test_a_file_is_its_own_unit_and_a_shared_folder_is_one() -> None:
    assert unit_of("tests/component/test_x.py::test_a") == "tests/component/test_x.py"
    assert unit_of("tests/cluster/test_moves.py::test_a[x]") == "tests/cluster/test_moves.py"
    for folder in scheduling.SHARED_FOLDERS:
        assert unit_of(f"{folder}test_a.py::test_b") == folder
        assert unit_of(f"{folder}test_c.py::K::test_d") == folder


def test_a_shared_folder_costs_the_sum_of_its_files() -> None:
    sched: Any = object.__new__(LongestFileFirst)  # only ``cost`` is exercised
    sched.known = {
        "tests/kube/test_a.py": 10.0,
        "tests/kube/test_b.py": 5.5,
        "tests/kubeless/test_c.py": 100.0,
        "tests/component/test_x.py": 3.0,
    }
    assert sched.cost("tests/kube/", 12) == 15.5
    assert sched.cost("tests/component/test_x.py", 7) == 3.0
    # Unknown: the tier's estimate per test.
    assert (
        sched.cost("tests/cluster/shared/", 4) == 4 * scheduling.SECONDS_PER_TEST["tests/cluster"]
    )
