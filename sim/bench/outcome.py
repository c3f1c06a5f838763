"""How a benchmark went, in the line `servesim bench` prints last: how many requests
succeeded and, of those that failed, the most common reasons with their counts (every
request's reason is in bench_requests.csv). `bench`'s exit status is 1 when none succeeded,
`validate --against`'s also when a request finished on one side only."""

from __future__ import annotations

from collections import Counter

SHOWN_REASONS = 3


def outcome_line(results) -> str:
    """`bench: 3 of 5 requests succeeded; 2 failed: 2 HTTP 503: ...`, or that all did."""
    total = len(results)
    noun = "request" if total == 1 else "requests"
    reasons = [r.reason for r in results if not r.finished]
    if not reasons:
        return f"bench: all {total} {noun} succeeded"
    common = Counter(reasons).most_common()  # ties in request order
    shown = [f"{count} {reason}" for reason, count in common[:SHOWN_REASONS]]
    rest = common[SHOWN_REASONS:]
    if rest:
        shown.append(f"{sum(count for _, count in rest)} for {len(rest)} other reasons "
                     f"(bench_requests.csv)")
    return (f"bench: {total - len(reasons)} of {total} {noun} succeeded; {len(reasons)} "
            f"failed: " + "; ".join(shown))


def any_succeeded(results) -> bool:
    return any(r.finished for r in results)
