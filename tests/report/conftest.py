"""Fixtures of the report tests: small real results of each command, and the browser."""

from __future__ import annotations

# A grid small enough to plan in about a second on one core: two ladder seeds, two expert
# counts, K in {1, 2}, G in {1, 2} on 4 p6-b200 nodes for 10 days.
TINY_PLAN_ARGS = ["--q", "8,10", "--experts", "8,16", "--top-k", "1,2", "--split-factor", "1,2",
                  "--nodes", "4", "--days", "10", "--workers", "1"]
