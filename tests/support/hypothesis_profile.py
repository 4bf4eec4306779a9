"""The suite's Hypothesis profile: properties judged by what they check, never by wall-clock time.

Hypothesis's per-example deadline and its "input generation is slow" health check both time the
test on the machine running it. On a loaded machine (a CI runner, several suites sharing two
cores) that says nothing about the code: a sanitize property once failed because one example took
3.8 s to generate. The profile turns off only those two; the examples drawn, the assertions and
every other health check are unchanged. `tests/conftest.py` loads it for every session.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

__all__ = ["PROFILE", "TIMING_CHECKS", "load"]

PROFILE = "reverser"
# A test that sets its own `suppress_health_check` replaces the profile's list: it must include these.
TIMING_CHECKS = (HealthCheck.too_slow,)


def load() -> None:
    settings.register_profile(PROFILE, deadline=None, suppress_health_check=TIMING_CHECKS)
    settings.load_profile(PROFILE)
