"""Implementations the conformance suite is tested against: independent correct ones
(must pass) and plausible wrong kernels (must be rejected, naming a vector)."""


def patched(fn, module, name: str, replacement):
    """`fn` run with `module.name` replaced by `replacement(original)` for the call's
    duration: a wrong kernel made from a correct one by swapping one of its helpers
    (a sampler, a tolerance, a child order)."""
    def kernel(*args, **kwargs):
        saved = getattr(module, name)
        setattr(module, name, replacement(saved))
        try:
            return fn(*args, **kwargs)
        finally:
            setattr(module, name, saved)
    return kernel
