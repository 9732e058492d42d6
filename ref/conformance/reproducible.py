"""The same examples however `ref` is installed, and nothing written to the working
directory: `reproducible_draws()` is the context the conformance run draws its
examples in.

hypothesis mixes into its draws constants it collects from every imported module
whose file is not in site-packages or the standard library (its "local" modules:
a source checkout of `ref`, an editable install, the user's own adapter), and it
caches them under `.hypothesis/constants` in the current directory. A seeded
property phase would then draw different examples from a wheel than from a
checkout, and change with the constants in the user's adapter. While the context
lasts, hypothesis sees no local constants (its built-in ones remain) and its
storage directory is a temporary one (named, created only if hypothesis writes, removed on exit).

Both are hypothesis internals (`internal.conjecture.providers._get_local_constants`,
`CONSTANTS_CACHE`, and `configuration.set_hypothesis_home_dir`), present from 6.136
(the floor) to at least 6.170; where one is missing, that part is left alone and the
run goes on.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

__all__ = ["current_home", "reproducible_draws"]


@contextmanager
def reproducible_draws(home: str | None = None) -> Iterator[None]:
    """While it lasts, hypothesis draws no constants from local modules and writes
    nowhere but a temporary directory (removed on exit), or `home`, a directory the
    caller owns: an isolated op's child writes in its parent's, so that a child killed
    on a hang or a crash leaves nothing behind."""
    with ExitStack() as stack:
        stack.enter_context(_no_local_constants())
        stack.enter_context(_temporary_storage(home))
        yield


def current_home() -> str | None:
    """hypothesis' storage directory now (inside `reproducible_draws`: its temporary one)."""
    try:
        from hypothesis import configuration
    except ImportError:
        return None
    home = vars(configuration).get(_HOME)
    return None if home is None else str(home)


@contextmanager
def _no_local_constants() -> Iterator[None]:
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants
    except ImportError:  # a hypothesis without local constants: nothing to do
        yield
        return
    original = getattr(providers, "_get_local_constants", None)
    cache = getattr(getattr(providers, "CONSTANTS_CACHE", None), "cache", None)
    if original is None or cache is None or not hasattr(cache, "clear"):
        yield
        return
    empty = Constants()

    def no_constants() -> Constants:
        return empty

    cache.clear()  # its entries may hold the local constants of draws made before
    providers._get_local_constants = no_constants
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.clear()  # and ours must not serve the draws after


_HOME = "__hypothesis_home_directory"  # configuration's module global (None until first used)


@contextmanager
def _temporary_storage(home: str | None) -> Iterator[None]:
    try:
        from hypothesis import configuration
    except ImportError:
        yield
        return
    set_home = getattr(configuration, "set_hypothesis_home_dir", None)
    if set_home is None:
        yield
        return
    previous = vars(configuration).get(_HOME)
    # Named, not made: hypothesis creates it only if it writes (it has nothing to write while
    # local constants are off), so a run killed mid-way leaves no empty folder behind.
    own = None if home else Path(tempfile.gettempdir()) / f"llm-ref-hypothesis-{uuid.uuid4().hex[:12]}"
    set_home(home or str(own))
    try:
        yield
    finally:
        set_home(previous)
        if own is not None:
            shutil.rmtree(own, ignore_errors=True)
