"""hypothesis profiles: `ci` (derandomized, bounded, no deadline), `deep`, `dev`.

`load()` picks `ci` when the CI environment variable is set, else the profile
named by HYPOTHESIS_PROFILE, else `dev`.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["PROFILES", "load", "register"]

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

PROFILES = {
    "ci": dict(derandomize=True, deadline=None, max_examples=30, suppress_health_check=_QUIET,
               database=None, print_blob=True),
    "dev": dict(deadline=None, max_examples=60, suppress_health_check=_QUIET),
    "deep": dict(deadline=None, max_examples=5000, suppress_health_check=_QUIET),
}


def register() -> None:
    for name, kwargs in PROFILES.items():
        settings.register_profile(name, **kwargs)


def load() -> str:
    """Register the profiles and load the one this environment asks for."""
    register()
    name = "ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev")
    if name not in PROFILES:
        raise ValueError(f"HYPOTHESIS_PROFILE: expected one of {sorted(PROFILES)}, got {name!r}")
    settings.load_profile(name)
    return name
