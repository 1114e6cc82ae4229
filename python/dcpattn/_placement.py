"""The DCP placement rule (the header's CONVENTIONS), for callers that build or check shards."""


def local_len(L, world, rank, interleave=1):
    """How many tokens of a global prefix of length L rank `rank` holds:
    (L // (W*I))*I + clamp(L % (W*I) - rank*I, 0, I)."""
    wi = world * interleave
    return (L // wi) * interleave + min(max(L % wi - rank * interleave, 0), interleave)


def rank_tokens(L, world, rank, interleave=1):
    """The global positions of a sequence of length L that rank `rank` holds, in local order:
    global token g lives on rank (g // I) % W at local index (g // (W*I))*I + g % I."""
    wi = world * interleave
    start = rank * interleave
    return [g for base in range(0, L, wi) for g in range(base + start, min(base + start + interleave, L))]
