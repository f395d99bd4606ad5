"""What a grade says: one status per test call, and the ColBench score over them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class TestStatus(str, Enum):
    """Outcome of one test call.

    ``PASSED``: the candidate's output equals the reference output (``==`` on plain data).
    ``WRONG``: it returned something else, or something that cannot leave the sandbox as data.
    ``ERROR``: it raised (including ``SystemExit``), or the answer does not define/compile.
    ``TIMEOUT``: it ran past the per-test wall-clock limit (or its CPU-time limit), or the answer's
    grading budget over all its tests ran out during it or before it (it then never ran; the detail
    says which).
    ``MEMORY``: it ran out of its address-space limit (``MemoryError``).
    ``OUTPUT_LIMIT``: it printed more than allowed, wrote a file over the size limit, or returned a
    value too large to transfer.
    ``CRASHED``: the process died without reporting (``os._exit``, a segfault, a killed server).
    ``INFRA_ERROR``: the grader itself failed (sandbox could not start, ...); not the answer's fault.
    ``REFERENCE_INVALID``: the reference output is ``None``, raises, times out or cannot be compared;
    such a test never passes, exactly as in the original ColBench scorer.
    """

    __test__ = False  # not a pytest test class

    PASSED = "passed"
    WRONG = "wrong"
    ERROR = "error"
    TIMEOUT = "timeout"
    MEMORY = "memory"
    OUTPUT_LIMIT = "output_limit"
    CRASHED = "crashed"
    INFRA_ERROR = "infra_error"
    REFERENCE_INVALID = "reference_invalid"

    def __str__(self) -> str:
        return self.value


@dataclass
class TestResult:
    """One named test call of a task and what happened to it."""

    __test__ = False

    name: str
    status: TestStatus
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status is TestStatus.PASSED

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "status": self.status.value, "detail": self.detail}

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> TestResult:
        return cls(name=str(row["name"]), status=TestStatus(row["status"]), detail=str(row.get("detail", "")))


@dataclass
class GradeResult:
    """The grade of one answer.

    ``score`` is ColBench's: passed tests / all tests, so every test counts in the denominator,
    infrastructure failures included. Those are flagged apart by ``infra_error`` so a trainer can
    drop the episode instead of learning from a reward the answer did not earn.
    ``output`` holds the first bytes the answer printed (stdout and stderr together), for debugging;
    ``error`` says why the answer was not run at all (no test calls, too long); ``elapsed_s`` is the
    wall-clock time of the answer's sandboxed run (not counting queueing or reference runs).

    The grading budget (see :class:`~colbench_gym.execution.Grader`): ``budget_s`` (None: none),
    ``spent_s`` the wall-clock time the answer's processes ran against it, ``out_of_budget``
    whether it ran out, and ``tests_cut`` how many tests it decided (``timeout``: the one running
    when it ran out, if any, and every one after it, which never ran).
    """

    score: float
    success: bool
    tests: list[TestResult] = field(default_factory=list)
    infra_error: bool = False
    error: str = ""
    output: str = ""
    elapsed_s: float = 0.0
    budget_s: float | None = None
    spent_s: float = 0.0
    out_of_budget: bool = False
    tests_cut: int = 0

    @classmethod
    def from_tests(
        cls, tests: list[TestResult], *, error: str = "", output: str = "", elapsed_s: float = 0.0,
        budget_s: float | None = None, spent_s: float = 0.0, out_of_budget: bool = False, tests_cut: int = 0,
    ) -> GradeResult:
        passed = sum(test.passed for test in tests)
        total = len(tests)
        return cls(
            score=passed / total if total else 0.0,
            success=total > 0 and passed == total,
            tests=tests,
            infra_error=any(test.status is TestStatus.INFRA_ERROR for test in tests),
            error=error,
            output=output,
            elapsed_s=elapsed_s,
            budget_s=budget_s,
            spent_s=spent_s,
            out_of_budget=out_of_budget,
            tests_cut=tests_cut,
        )

    def budget_info(self) -> dict[str, Any]:
        """The budget's figures: ``budget_s``, ``spent_s``, ``out_of_budget``, ``tests_cut``."""
        return {
            "budget_s": self.budget_s,
            "spent_s": round(self.spent_s, 6),
            "out_of_budget": self.out_of_budget,
            "tests_cut": self.tests_cut,
        }

    def status_counts(self) -> dict[str, int]:
        """``{status value: number of tests}`` for the statuses that occur."""
        return dict(Counter(test.status.value for test in self.tests))

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "success": self.success,
            "infra_error": self.infra_error,
            "error": self.error,
            "output": self.output,
            "elapsed_s": round(self.elapsed_s, 6),
            **self.budget_info(),
            "status_counts": self.status_counts(),
            "tests": [test.to_dict() for test in self.tests],
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> GradeResult:
        return cls(
            score=float(row["score"]),
            success=bool(row["success"]),
            tests=[TestResult.from_dict(t) for t in row.get("tests", [])],
            infra_error=bool(row.get("infra_error", False)),
            error=str(row.get("error", "")),
            output=str(row.get("output", "")),
            elapsed_s=float(row.get("elapsed_s", 0.0)),
            budget_s=None if row.get("budget_s") is None else float(row["budget_s"]),
            spent_s=float(row.get("spent_s", 0.0)),
            out_of_budget=bool(row.get("out_of_budget", False)),
            tests_cut=int(row.get("tests_cut", 0)),
        )
