"""scripts/time_tests.py: the test commands' timing, and the slow tests chosen from measured per-test durations."""

import time_tests


def test_the_slowest_tests_are_chosen_until_the_rest_fits_its_share():
    seconds = {"a::x": 50.0, "b::y": 30.0, "c::z": 15.0, "d::w": 5.0}
    assert time_tests.choose_slow(seconds, 0.5) == ["a::x"]  # the rest: 50 of 100
    assert time_tests.choose_slow(seconds, 0.2) == ["a::x", "b::y"]  # 20 of 100
    assert time_tests.choose_slow(seconds, 0.05) == ["a::x", "b::y", "c::z"]
    assert time_tests.choose_slow(seconds, 1.0) == []


def test_durations_sum_the_phases_and_parametrizations_of_each_test_function(tmp_path):
    junit = tmp_path / "junit.xml"
    junit.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.faults.test_runs" name="test_a[one]" time="1.5"/>'
        '<testcase classname="tests.faults.test_runs" name="test_a[two]" time="2.0"/>'
        '<testcase classname="tests.test_cli" name="test_b" time="0.25"><skipped/></testcase>'
        "</testsuite></testsuites>"
    )
    assert time_tests.durations_of(junit) == {
        "tests/faults/test_runs.py::test_a": 3.5,
        "tests/test_cli.py::test_b": 0.25,
    }


def test_the_summary_line_gives_the_counts():
    output = "....s\n=== short test summary info ===\nSKIPPED [1] x\n1,121 passed, 18 skipped, 40 deselected, 38 warnings in 812.3s\n"
    output = output.replace("1,121", "1121")
    assert time_tests.summary_counts(output) == {"passed": 1121, "skipped": 18, "deselected": 40, "warning": 38}


def test_the_slow_list_is_what_conftest_marks(tmp_path):
    from slow_marks import slow_tests

    path = tmp_path / "slow_tests.txt"
    time_tests.write_slow_tests(["a.py::x"], {"a.py::x": 3.0, "b.py::y": 1.0}, "a trial", path)
    assert slow_tests(path) == {"a.py::x"} and "75% of the suite's summed test time" in path.read_text()
