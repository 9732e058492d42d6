"""Small stand-in objects that prove the stateful kind before the caches area's
first real operation: a reference, correct twins that choose differently, and
buggy twins written the way real block managers go wrong."""
