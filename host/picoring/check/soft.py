"""Soft mutual exclusion's stabilisation after a token loss (Ciuffoletti, Figure 4), from the
token count's history: the same measure for a simulator run and a ring trace.

The paper does not say when a transient ends. Here (as figures_wt.py's doc): a transient
begins at a token loss that leaves no token alive and ends where the first stretch after it
with a token alive throughout lasts `hold` begins (the wandering token: Delta_max, the time
after which a component that has seen no token makes one). A loss during a transient is part
of it; a regenerated token that the removal rule takes again (the domino effect, section 4) is
too. A loss that leaves another token alive starts no transient.
"""

from bisect import bisect_right

from .quantile import nearest_rank


def transients(times, counts, losses, hold, end):
    """[(loss time, stabilisation time)] of each transient, in order; the time is None when the
    run ended before the transient did. times, counts: the token count's history (counts[i]
    tokens alive from times[i] on; times ascending, a loss's own change included); losses: when
    tokens were lost; end: the run's last time."""
    out = []
    busy_until = None  # the end of the last transient: losses before it were part of it
    for loss in sorted(losses):
        if busy_until is not None and loss < busy_until:
            continue
        i = bisect_right(times, loss) - 1  # the count just after the loss
        if i < 0 or counts[i] != 0:
            continue
        settled = None
        alive_since = None
        for j in range(i + 1, len(times)):
            if counts[j] > 0:
                if alive_since is None:
                    alive_since = times[j]
            elif alive_since is not None:
                if times[j] - alive_since >= hold:
                    settled = alive_since
                    break
                alive_since = None
        if settled is None and alive_since is not None and end - alive_since >= hold:
            settled = alive_since
        out.append((loss, None if settled is None else settled - loss))
        busy_until = settled if settled is not None else float("inf")
    return out


def summary(found):
    """{"count", "unfinished", "mean", "p50", "max", "times"} of transients()' result."""
    done = sorted(s for _, s in found if s is not None)
    return {
        "count": len(found),
        "unfinished": len(found) - len(done),
        "mean": (sum(done) / len(done)) if done else None,
        "p50": nearest_rank(done, 0.5) if done else None,
        "max": done[-1] if done else None,
        "times": [[t, s] for t, s in found],
    }
