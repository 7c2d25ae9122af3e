"""The Destination's property test (issue 10, "Done when"): a seeded random walk over a Source's
life with a Destination syncing at random moments — while files change under the documents,
after publishes killed mid-run, itself killed mid-sync — where no sync says ok over a copy that
differs from what the Source's documents say, `audit` agrees with the truth after every sync,
and the copy converges once the Source settles. A long run: `bench/bench_destination_walk.py`.
"""

from __future__ import annotations

from pathlib import Path

from tests.destination.walk import destination_walk

STEPS = 100


def test_a_destination_syncing_at_random_never_says_ok_over_a_wrong_copy(tmp_path: Path) -> None:
    with destination_walk(tmp_path, seed=10) as w:
        for _ in range(STEPS):
            op = w.step()
            w.counts[op] += 1
        # Whether a kill lands inside a run depends on this machine's speed, and how often the
        # walk kills a publish on what its syncs found (the random steps follow from what the
        # copy holds): a few more, each followed by a checked sync, until each happened enough.
        for _ in range(40):
            if w.counts["sync-killed"] >= 3:
                break
            w.file_op()
            w.settled = False
            w.sync_killed(soon=True)
            w.sync()
        for _ in range(10):
            if w.counts["publish-killed"] >= 3 and w.counts["publish-while-changing"] >= 3:
                break
            w.file_op()
            if w.counts["publish-killed"] < 3:
                w.publish_killed()
                w.check(complete=False)
                w.counts["publish-killed"] += 1
            else:
                w.publish_while_changing()
                w.check(complete=True)
                w.counts["publish-while-changing"] += 1
            w.settled = False
            w.sync()
        w.settle()
    assert w.counts["sync-killed"] >= 3, w.counts
    assert w.counts["sync-ok"] >= 5 and w.counts["sync-converged"] >= 1, w.counts
    assert w.counts["publish-killed"] >= 3 and w.counts["publish-while-changing"] >= 3, w.counts


def test_a_destination_through_a_source_that_lets_its_history_go(tmp_path: Path) -> None:
    """The same walk with a Source that drops its old Change Lists and Change Dumps (random
    `--keep-changelists`, `--keep-changedumps`): a copy left behind is told, never ok over
    what it lacks, and a baseline brings it back."""
    with destination_walk(tmp_path, seed=215, retention=True) as w:
        for _ in range(STEPS):
            op = w.step()
            w.counts[op] += 1
        # Syncs that end ok are what a left-behind copy is judged against: a few more, each
        # after a change and checked, until there were enough (the draws follow the timing).
        for _ in range(20):
            if w.counts["sync-ok"] >= 3:
                break
            w.file_op()
            w.publish_clean()
            w.settled = True
            w.check(complete=True)
            w.sync()
        w.settle()
    assert w.counts["sync-ok"] >= 3 and w.counts["sync-converged"] >= 1, w.counts
    assert w.counts["policy"] >= 3, w.counts
