"""The interval every benchmark here reports for a median, shared by run.py and loader.py."""

import math

CONFIDENCE = 0.95


def median_interval(values):
    """(low, high, confidence): the sign-test interval for the median of `values`, the k-th
    smallest and k-th largest value with k as large as keeps the confidence >= CONFIDENCE
    (k = 1, the min-max, when even that falls short)."""
    ordered, n = sorted(values), len(values)

    def confidence(k):  # P(k-th smallest <= median <= k-th largest) = 1 - 2 P(Bin(n, 1/2) < k)
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k < (n + 1) // 2 and confidence(k + 1) >= CONFIDENCE:
        k += 1
    return ordered[k - 1], ordered[n - k], confidence(k)
