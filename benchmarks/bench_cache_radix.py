"""The radix prefix cache under a serving-like workload: operations per second of the
oracle (ref.cache.radix), the default kernel (python_radix) and, when importable,
SGLang's own RadixCache (through ref.conformance.adapters.sglang_radix), on the same
trace in the same run; and the oracle's memory per cached token.

The workload: 8 system prompts of 512 tokens shared by 64 chats of 6 turns; each
turn's request is the system prompt, the history and a new 64-token user message:
match_prefix, lock, insert (the request and a 128-token answer), unlock, then evict
down to a 40,000-token budget. Run: `python benchmarks/bench_cache_radix.py`.
"""

from __future__ import annotations

import random
import sys
import time
import tracemalloc

from ref.cache.radix import RadixCache
from ref.conformance.adapters.python_radix import RadixTrie

BUDGET = 40_000


def workload(seed: int = 0) -> list[list[int]]:
    """The requests, in arrival order: chats interleaved turn by turn."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(32_000) for _ in range(512)] for _ in range(8)]
    chats = [list(prompts[c % 8]) for c in range(64)]
    requests = []
    for _ in range(6):
        for chat in rng.sample(range(64), 64):
            chats[chat] += [rng.randrange(32_000) for _ in range(64)]
            requests.append(list(chats[chat]))
            chats[chat] += [rng.randrange(32_000) for _ in range(128)]  # the answer, cached at the end
            requests.append(list(chats[chat]))
    return requests


def serve(cache, requests) -> int:
    """Replay the requests (pairs: prompt, prompt + answer); the number of calls made."""
    calls = 0
    for prompt, full in zip(requests[::2], requests[1::2]):
        node = cache.match_prefix(prompt)["node"]
        cache.lock(node)
        cache.insert(full)
        cache.unlock(node)
        size = cache.evictable_size() + cache.protected_size()
        calls += 6
        if size > BUDGET:
            cache.evict(size - BUDGET)
            calls += 1
    return calls


def timed(factory, requests) -> tuple[float, int]:
    best, calls = float("inf"), 0
    for _ in range(3):
        cache = factory()
        start = time.perf_counter()
        calls = serve(cache, requests)
        best = min(best, time.perf_counter() - start)
    return best, calls


def main() -> None:
    requests = workload()
    rows = [("ref.cache.radix (oracle)", RadixCache), ("python_radix (default kernel)", lambda: RadixTrie())]
    try:
        from ref.conformance.adapters.sglang_radix import SGLangRadix
        rows.append(("SGLang RadixCache (through its adapter)", SGLangRadix))
    except ImportError as exc:
        print(f"SGLang not importable ({exc}): its row is left out", file=sys.stderr)
    results = {name: timed(factory, requests) for name, factory in rows}
    base = results[rows[-1][0]][0]
    print(f"{len(requests) // 2} requests; ratios to {rows[-1][0]}")
    print("| implementation | s | calls/s | ratio |")
    print("|---|---|---|---|")
    for name, (seconds, calls) in results.items():
        print(f"| {name} | {seconds:.3f} | {calls / seconds:,.0f} | {seconds / base:.2f} |")
    tracemalloc.start()
    cache = RadixCache()
    serve(cache, requests)
    used, _ = tracemalloc.get_traced_memory()
    tokens = cache.evictable_size() + cache.protected_size()
    print(f"oracle memory: {used / tokens:.1f} bytes per cached token ({tokens} tokens, tracemalloc)")


if __name__ == "__main__":
    main()
