"""Identifiers an implementation may choose (block ids, handles), compared "equal
up to renaming": a bijection between the oracle's ids and the candidate's, kept
across a whole trace of a stateful op (ref.testing.stateful).

A path names where ids sit in a step: the method, then `observation` or
`args.NAME`, then `[*]` (every element of a list) or `.key` (an object's member),
any number of times: `allocate.observation[*]`, `free.args.ids[*]`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["IdentifierPath", "Renaming"]

_PATH = re.compile(r"(?P<method>[A-Za-z_]\w*)\.(?P<root>observation|args\.[A-Za-z_]\w*)"
                   r"(?P<rest>(?:\[\*\]|\.[A-Za-z_]\w*)*)")


@dataclass(frozen=True)
class IdentifierPath:
    """Where identifiers sit in one method's steps: `allocate.observation[*]` (every
    element of what allocate returns), `free.args.ids[*]` (every element of its
    argument `ids`), `lookup.observation.block` (a member of a returned object)."""

    method: str
    root: str  # "observation" or "args.<name>"
    segments: tuple[str, ...]  # "[*]" (every element of a list) or ".key" (an object's member)

    @classmethod
    def parse(cls, text: str, methods: Sequence[str], field_name: str) -> IdentifierPath:
        m = _PATH.fullmatch(text) if isinstance(text, str) else None
        if m is None:
            raise ValueError(f"{field_name}: {text!r} is not a path like 'allocate.observation[*]' or "
                             f"'free.args.ids[*]' (method, then observation or args.NAME, then [*] or .key)")
        if m["method"] not in methods:
            raise ValueError(f"{field_name}: {text!r} names method {m['method']!r}, not one of {tuple(methods)}")
        return cls(m["method"], m["root"], tuple(re.findall(r"\[\*\]|\.\w+", m["rest"])))


def _walk(value: Any, at: tuple[str, ...] = ()):
    """(location, value) of every node of a JSON value; a list element's location
    token is "[*]", an object member's ".key"."""
    yield at, value
    if isinstance(value, list):
        for v in value:
            yield from _walk(v, at + ("[*]",))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, at + (f".{k}",))


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


class Renaming:
    """Identifiers compared "equal up to renaming": a bijection from the oracle's ids
    to the candidate's, kept across the whole trace. An oracle id seen for the first
    time binds to the candidate's id at the same place, which must not already stand
    for another oracle id; an id seen again must map the same way. A release path
    ends the binding of the ids it holds once the step succeeds. Arguments at
    identifier paths are translated into the candidate's ids before its call."""

    def __init__(self, methods: Sequence[str], identifiers: Sequence[str], releases: Sequence[str] = ()):
        self.ids = [IdentifierPath.parse(p, methods, "identifiers") for p in identifiers]
        self.released = [IdentifierPath.parse(p, methods, "releases") for p in releases]
        self.forward: dict[str, Any] = {}  # oracle id (as JSON text) -> candidate id
        self.backward: dict[str, Any] = {}  # candidate id (as JSON text) -> oracle id
        self.retired: dict[str, Any] = {}  # oracle id -> the candidate id it had when released

    def _at(self, paths: list[IdentifierPath], method: str, root: str) -> set[tuple[str, ...]]:
        return {p.segments for p in paths if p.method == method and p.root == root}

    def compare(self, method: str, expected: Any, actual: Any) -> str | None:
        """None when `actual` is `expected` up to renaming (binding new ids), else the
        first difference and where it is (`observation[1].block`)."""
        places = self._at(self.ids, method, "observation")
        bound: dict[str, Any] = {}
        problem = self._match(expected, actual, (), "observation", places, bound)
        if problem is None:
            for k, v in bound.items():
                self.forward[k], self.backward[_key(v)] = v, json.loads(k)
        return problem

    def _match(self, e: Any, a: Any, at: tuple[str, ...], where: str, places, bound) -> str | None:
        if at in places and (e is None or a is None):  # null is no id: it matches only null
            return None if e is None and a is None else f"{where}: expected {_key(e)}, got {_key(a)}"
        if at in places:
            ek, ak = _key(e), _key(a)
            if ek in bound or ek in self.forward:
                want = bound[ek] if ek in bound else self.forward[ek]
                return None if _key(want) == ak else (f"{where}: oracle id {ek} stands for the candidate's "
                                                      f"{_key(want)}, got {ak}")
            owner = [k for k, v in bound.items() if _key(v) == ak] or (
                [_key(self.backward[ak])] if ak in self.backward else [])
            if owner:
                return (f"{where}: the candidate's id {ak} already stands for oracle id {owner[0]}, "
                        f"here it would stand for {ek} too")
            bound[ek] = a
            return None
        if isinstance(e, list) and isinstance(a, list):
            if len(e) != len(a):
                return f"{where}: expected {len(e)} elements, got {len(a)}"
            return next((p for i, (x, y) in enumerate(zip(e, a))
                         if (p := self._match(x, y, at + ("[*]",), f"{where}[{i}]", places, bound))), None)
        if isinstance(e, dict) and isinstance(a, dict):
            if set(e) != set(a):
                return f"{where}: expected keys {sorted(e)}, got {sorted(a)}"
            return next((p for k in e if (p := self._match(e[k], a[k], at + (f".{k}",), f"{where}.{k}", places,
                                                          bound))), None)
        return None if _key(e) == _key(a) else f"{where}: expected {_key(e)}, got {_key(a)}"

    def translate(self, method: str, args: Mapping[str, Any]) -> dict[str, Any]:
        """`args` with every oracle id at an identifier path replaced by the
        candidate's: its binding; an id released before, by the candidate id it had
        (a double free reaches the candidate as one) unless that id now stands for
        another; an id never bound, by itself or, if the candidate uses that value,
        by one it does not."""
        out = {}
        for name, value in args.items():
            places = self._at(self.ids, method, f"args.{name}")
            out[name] = self._rewrite(value, (), places) if places else value
        return out

    def _rewrite(self, value: Any, at: tuple[str, ...], places) -> Any:
        if at in places:
            k = _key(value)
            if k in self.forward:
                return self.forward[k]
            for option in (self.retired.get(k), value):
                if option is not None and _key(option) not in self.backward:
                    return option
            fresh = value
            while _key(fresh) in self.backward:
                fresh = fresh + 1 if isinstance(fresh, int) and not isinstance(fresh, bool) else f"{fresh}'"
            return fresh
        if isinstance(value, list):
            return [self._rewrite(v, at + ("[*]",), places) for v in value]
        if isinstance(value, dict):
            return {k: self._rewrite(v, at + (f".{k}",), places) for k, v in value.items()}
        return value

    def release(self, method: str, args: Mapping[str, Any], observation: Any) -> None:
        """End the bindings of the ids at release paths of a step that succeeded
        (`args` and `observation` in the oracle's terms)."""
        found = []
        for p in self.released:
            if p.method != method:
                continue
            if p.root == "observation":
                found += [v for at, v in _walk(observation) if at == p.segments]
            elif p.root[5:] in args:
                found += [v for at, v in _walk(args[p.root[5:]]) if at == p.segments]
        for value in found:
            k = _key(value)
            if k in self.forward:
                self.retired[k] = theirs = self.forward.pop(k)
                self.backward.pop(_key(theirs), None)
