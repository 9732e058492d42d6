"""vLLM's hash-chained prefix cache under a serving-like workload: operations per
second of the oracle (ref.cache.prefix_blocks.PrefixBlockCache), the default kernel
(ref.conformance.adapters.python_prefix_blocks) and, when importable, vLLM's own
BlockPool / KVCacheManager (driven by ref.conformance.adapters.vllm_prefix, the
conformance adapter, imported, not copied), on the same seeded trace in the same run,
printed as ratios to vLLM; and the oracle's memory per cached token (tracemalloc).

The workload (block size 16, sha256_cbor): 8 system prompts of 256 to 768 tokens
shared by 32 chats of 5 turns; each turn's prompt is the previous prompt, its answer
and a new user message of 16 to 128 tokens. Requests arrive from a queue of chats
(a chat rejoins the back when its turn finishes) and run 8 at a time: lookup and
allocate on arrival, then the answer (32 to 256 tokens) decoded DECODE_STEP tokens per
append, then free. The pool (1,536 blocks, 24,576 tokens) always fits the 8 running
requests but not the 2,506 distinct full blocks (40K tokens) the chats produce, so
cached blocks are evicted (lazily, at reuse). Every implementation's hit lengths (of
each lookup and allocate) and eviction count on its first timed run are asserted equal
to the oracle's before any time is printed.

Run: `env -u PYTHONHASHSEED python benchmarks/bench_cache_prefix_blocks.py`
(PYTHONHASHSEED must be unset for vLLM: it replaces vLLM's NONE_HASH seed).
"""

from __future__ import annotations

import gc
import random
import sys
import time
import tracemalloc

from ref.cache.prefix_blocks import PrefixBlockCache
from ref.conformance.adapters.python_prefix_blocks import PrefixCache

BLOCK = 16
NUM_BLOCKS = 1536
RUNNING = 8
CHATS, TURNS = 32, 5
DECODE_STEP = 16  # tokens per append (one block); see benchmarks/README.md for per-token decode


def workload(seed: int = 0) -> list[tuple]:
    """The calls, in order: ("lookup", tokens), ("allocate", id, tokens),
    ("append", id, tokens), ("free", id)."""
    rng = random.Random(seed)
    words = lambda n: [rng.randrange(32_000) for _ in range(n)]  # noqa: E731
    systems = [words(rng.randrange(256, 769)) for _ in range(8)]
    chats = {c: list(systems[c % 8]) for c in range(CHATS)}
    turns = dict.fromkeys(chats, 0)
    waiting = rng.sample(range(CHATS), CHATS)
    running: dict[str, list] = {}  # request id -> [chat, answer tokens left to decode]
    calls, serial = [], 0
    while waiting or running:
        while waiting and len(running) < RUNNING:
            chat = waiting.pop(0)
            chats[chat] += words(rng.randrange(16, 129))
            rid = f"r{serial}"
            serial += 1
            calls.append(("lookup", list(chats[chat])))
            calls.append(("allocate", rid, list(chats[chat])))
            running[rid] = [chat, words(rng.randrange(32, 257))]
        for rid in list(running):
            chat, answer = running[rid]
            step, running[rid][1] = answer[:DECODE_STEP], answer[DECODE_STEP:]
            calls.append(("append", rid, step))
            chats[chat] += step
            if not running[rid][1]:
                calls.append(("free", rid))
                del running[rid]
                turns[chat] += 1
                if turns[chat] < TURNS:
                    waiting.append(chat)
    return calls


def serve(cache, calls) -> tuple[list[int], int]:
    """Replay the calls: the hit lengths (lookup and allocate) and the blocks evicted."""
    hits, evicted = [], 0
    for call in calls:
        if call[0] == "lookup":
            hits.append(cache.lookup(call[1])["hit_tokens"])
        elif call[0] == "allocate":
            out = cache.allocate(call[1], call[2])
            hits.append(out["hit_tokens"])
            evicted += len(out["evicted"])
        elif call[0] == "append":
            evicted += len(cache.append(call[1], call[2])["evicted"])
        else:
            cache.free(call[1])
    return hits, evicted


def timed(factory, calls, repeat: int) -> tuple[float, tuple[list[int], int]]:
    """The best time of `repeat` runs, each on a fresh cache, and the first run's results."""
    best, results = float("inf"), None
    for _ in range(repeat):
        cache = factory()
        start = time.perf_counter()
        out = serve(cache, calls)
        best = min(best, time.perf_counter() - start)
        results = results or out
    return best, results


def main() -> None:
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    calls = workload()
    rows = [("ref.cache.prefix_blocks (oracle)", lambda: PrefixBlockCache(NUM_BLOCKS, BLOCK)),
            ("python_prefix_blocks (default kernel)", lambda: PrefixCache(NUM_BLOCKS, BLOCK))]
    try:
        import vllm
        from ref.conformance.adapters.vllm_prefix import VllmPrefixCache
        rows.append((f"vLLM {vllm.__version__} KVCacheManager (through its adapter)",
                     lambda: VllmPrefixCache(NUM_BLOCKS, BLOCK)))
    except (ImportError, RuntimeError) as exc:
        print(f"vLLM skipped (not importable: {exc}); ratios are to the oracle", file=sys.stderr)

    # each implementation's first run is checked against the oracle's before any time is reported
    measured = {name: timed(factory, calls, repeat) for name, factory in rows}
    hits, evicted = measured[rows[0][0]][1]
    for name, (_, result) in measured.items():
        assert result == (hits, evicted), f"{name} disagrees with the oracle on hit lengths or evictions"
    prompts = [len(c[2]) for c in calls if c[0] == "allocate"]
    served = sum(hits[1::2])
    counts = {k: sum(c[0] == k for c in calls) for k in ("lookup", "allocate", "append", "free")}
    print(f"{len(calls):,} calls ({', '.join(f'{v:,} {k}' for k, v in counts.items())}); "
          f"{len(prompts)} requests, {sum(prompts):,} prompt tokens, {served:,} served from the cache "
          f"({served / sum(prompts):.1%}), {evicted:,} blocks evicted; hit lengths equal in all "
          f"{len(rows)} implementations")

    results = {name: seconds for name, (seconds, _) in measured.items()}
    base_name = rows[-1][0] if len(rows) == 3 else rows[0][0]  # vLLM's, else the oracle's
    base = results[base_name]
    print(f"best of {repeat}; ratio = time / {base_name}'s time")
    print("| implementation | s | calls/s | ratio |")
    print("|---|---|---|---|")
    for name, seconds in results.items():
        print(f"| {name} | {seconds:.3f} | {len(calls) / seconds:,.0f} | {seconds / base:.2f} |")

    tracemalloc.start()
    cache = PrefixBlockCache(NUM_BLOCKS, BLOCK)
    serve(cache, calls)
    gc.collect()  # the run leaves cyclic garbage behind (about 0.3 MB here), not part of the cache
    used, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tokens = len(cache.snapshot()["cached"]) * BLOCK
    print(f"oracle memory: {used / tokens:.1f} bytes per cached token ({tokens:,} tokens in "
          f"{tokens // BLOCK} hashed blocks, {used / 1e6:.2f} MB, tracemalloc)")


if __name__ == "__main__":
    main()
