"""Quantiles of measured values, one method for every report: the checker's, the soft measures'
(soft.py), the dashboard's and the plots'."""

import math


def nearest_rank(sorted_values, q):
    """The quantile q (0..1) of a sorted, non-empty list by the nearest-rank method."""
    k = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]
