"""The verdicts of the regression check (bandwidth.report.baseline) and the Diff that carries
one: the names every part of the check shares."""

from __future__ import annotations

from dataclasses import dataclass

from bandwidth.errors import ConfigError
from bandwidth.report.stats import Spread


PASS, FASTER, REGRESSION, BELOW_FLOOR, NEW, ONE_DEVICE, SIZE_DIFFERS = (
    "ok", "faster", "REGRESSION", "BELOW FLOOR", "new", "one device", "bytes differ")
MISSING, MISSING_ALLOWED = "MISSING", "missing"      # fails closed; "missing" with --allow-missing
NOT_SIGNIFICANT = "ok (drop not significant)"        # beyond the tolerance, but within the noise
NOT_CONFIRMED = "ok (not confirmed)"                 # failed, but its confirmation pass passed
LINK_LOST, BELOW_CEILING, NO_CEILING = "LINK LOST", "BELOW CEILING", "NO CEILING"
FAILING = (REGRESSION, BELOW_FLOOR, MISSING, LINK_LOST, BELOW_CEILING, NO_CEILING)
# The verdicts on a measured figure: with --repeat auto such a row is measured again (the
# confirmation pass) before it fails. Missing rows, lost links and missing ceilings are not noise.
CONFIRMED_GATES = (REGRESSION, BELOW_FLOOR, BELOW_CEILING)


class BaselineMismatchError(ConfigError):
    """The baseline was measured on other hardware (exit status 2, as any bad input)."""
ROW_VERDICTS = (PASS, FASTER, NOT_SIGNIFICANT, NOT_CONFIRMED, REGRESSION)


@dataclass(frozen=True)
class Diff:
    """One line of the diff table: one gated row."""

    label: str                      # MODE NETWORK GPUS (+ dtype, optimizer when not the default)
    key: tuple
    baseline_gbps: float | None     # None: the row is not in the baseline
    now_gbps: float | None          # the judged repeat's median (pooled with --repeat auto)
    repeats: int                    # rows of this run with this key
    change_pct: float | None        # (now - baseline) / baseline, of the judged repeat
    verdict: str
    p_value: float | None = None    # the rank test's one-sided p (None: not tested; see note)
    spread: Spread | None = None    # p50, p95, cv of the judged repeat's iterations
    note: str | None = None         # why the rank test was not applied, or a row's verdict detail
    gate: str = "baseline"          # "baseline" (and the floor), "floor", "ceiling" or "link"

    @property
    def failed(self) -> bool:
        return self.verdict in FAILING
