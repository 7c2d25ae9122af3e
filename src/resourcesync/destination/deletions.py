"""Carrying out a plan's deletions (`Deletions.apply`, after the fetches): only a file this
copy wrote, still as it wrote it, is removed; with `--delete` off, or past `--max-delete`, or
when the Source would empty the copy, they are kept pending; one that cannot be made here
stays pending too. A repair removes the strays it found (files no URI of the Source maps to
and the copy does not hold). The fetches are `transfer.Transfer`'s.
"""

from __future__ import annotations

import os

from ..errors import ResourceSyncError
from .mirror import UnsafePath
from .options import Run
from .plan import Plan
from .report import Action, SetReport
from .state import path_key
from .transfer import tell, verified_copy

__all__ = ["Deletions"]


class Deletions:
    """One run's deletions (see the module docstring)."""

    def __init__(self, run: Run) -> None:
        self.run = run

    def apply(self, plan: Plan, key: str, report: SetReport) -> None:
        """Apply the planned deletions (with --delete), else keep them as pending.

        Only a file this sync wrote, still as it wrote it, is deleted: a deletion for a URI
        this copy never held, or whose file was changed since, leaves the file in place and
        is reported (issue 17.10)."""
        opts, mirror, state = self.run.options, self.run.mirror, self.run.state
        pending = 0
        delete = opts.delete
        if delete and (opts.max_delete is not None or not opts.allow_empty):
            held = sum(1 for uri, _ in plan.rows("delete") if state.known(uri) is not None)
            planned = held + sum(1 for _ in plan.strays())
            if opts.repair:
                # A repair removes the files of the deletions it never held, as strays.
                planned += sum(1 for uri, _ in plan.rows("delete") if self._stray_at(uri))
            if opts.max_delete is not None and planned > opts.max_delete:
                delete = False
                report.incomplete = (
                    f"{planned} deletions planned, more than --max-delete {opts.max_delete}: "
                    "none applied, all kept pending (check the Source, then run again with a "
                    "higher --max-delete)"
                )
            elif (
                not opts.allow_empty
                and held > 0
                and plan.count("fetch") == 0
                and held >= state.count(key)
            ):
                # Every resource of the set would go and none come: what a Source that lost
                # its data (a database restored empty, a volume not mounted) publishes.
                delete = False
                report.incomplete = (
                    f"the Source no longer lists any resource this copy holds ({held:,}): none "
                    "deleted, all kept pending (check the Source, then run again with "
                    "--allow-empty to delete them)"
                )
        for uri, res in plan.rows("delete"):
            if opts.repair and self._stray_at(uri):
                # A file at the place of a resource the Source deleted, which this copy does
                # not hold (its state lost, or the file put there by hand): a stray for a
                # repair, which removes it with --delete (`audit` calls it extra and names
                # this command to repair it; it was kept as "never held" before).
                self._remove_stray(self.run.mirror.location(uri), report, delete)
                if not opts.dry_run:
                    state.forget(uri)
                continue
            if not delete:
                if state.known(uri) is None:
                    # Never held here (deleted at the Source before this copy saw it): there
                    # is nothing to delete, now or later (issue 14.12).
                    if not opts.dry_run:
                        state.forget(uri)
                    continue
                pending += 1
                if opts.dry_run:
                    report.list_would("pending", uri)
                else:
                    state.pend_delete(uri, res.change_time, key)
                tell(self.run, "pending", uri)
                continue
            try:
                why_not, held = self._not_ours(uri)
                if why_not is not None:
                    report.refused += 1
                    report.problem(uri, why_not)
                    if opts.dry_run:
                        continue
                    if held:
                        # Still a deletion to make: every run with --delete says so (not ok)
                        # until the file is gone or what this copy wrote again. Forgotten, the
                        # next run said ok over the file the Source no longer lists.
                        state.pend_delete(uri, res.change_time, key)
                    else:
                        state.forget(uri)
                    continue
                removed = mirror.delete(uri)
            except UnsafePath as exc:
                report.refuse(uri, exc)
                if not opts.dry_run:
                    state.forget(uri)  # never held; gone at the Source: not tried again
                continue
            except (ResourceSyncError, OSError) as exc:
                report.failed += 1
                if isinstance(exc, ResourceSyncError):
                    report.problem(uri, exc.message)
                else:
                    report.problem(uri, f"cannot delete: {exc.strerror or exc}")
                if not opts.dry_run:
                    # Kept pending: the next run with --delete makes it. Forgotten, the next
                    # run said ok over the file the Source deleted.
                    state.pend_delete(uri, res.change_time, key)
                continue
            if removed:
                report.deleted += 1
                if opts.dry_run:
                    report.list_would("deleted", uri)
                tell(self.run, "deleted", uri)
            if not opts.dry_run:
                state.forget(uri)
        self._remove_strays(plan, report, delete)
        if opts.dry_run:
            # What this run would leave pending, not what the state held before it.
            report.pending_deletes = pending

    def _remove_strays(self, plan: Plan, report: SetReport, delete: bool) -> None:
        """`--repair`: the files of DEST no URI of the Source maps to and the copy does not
        hold are removed with --delete (backed up with --backup-dir), else reported."""
        for path in plan.strays():
            self._remove_stray(path, report, delete)

    def _remove_stray(self, path: str, report: SetReport, delete: bool) -> None:
        if not delete:
            report.strays += 1
            report.problem(
                f"file {path}", "not from the Source (kept; --repair --delete removes it)"
            )
            return
        try:
            removed = self.run.mirror.remove_stray(path)
        except ResourceSyncError as exc:
            report.failed += 1
            report.problem(f"file {path}", exc.message)
            return
        if removed:
            report.deleted += 1
            if self.run.options.dry_run:
                report.list_would("deleted", f"file {path}")
            if self.run.options.on_action is not None:
                self.run.options.on_action(Action("deleted", f"file {path}"))

    def _stray_at(self, uri: str) -> bool:
        """Whether a deletion of `uri` finds a file at its place that the copy does not hold,
        for this URI or any other (a repair takes it for a stray; a file another URI holds —
        `dir/` kept over `dir/index.html` — is that one's)."""
        state, mirror = self.run.state, self.run.mirror
        if state.known(uri) is not None:
            return False
        try:
            path = mirror.location(uri)
        except UnsafePath:
            return False
        return os.path.isfile(path) and state.owner(path_key(mirror.stored(path))) is None

    def _not_ours(self, uri: str) -> tuple[str | None, bool]:
        """Why the file at `uri`'s path must not be deleted (None when it may be), and
        whether the copy holds `uri`."""
        mirror, state = self.run.mirror, self.run.state
        path = mirror.path_for(uri)
        if not os.path.lexists(path):
            return None, False
        known = state.known(uri)
        if known is None:
            return f"not deleted: this copy never held {uri}; the file {path} is kept", False
        if not verified_copy(self.run, uri, path, known.length, known.hashes):
            return (
                f"not deleted: {path} was changed since this sync wrote it; kept (said by "
                "every run with --delete until it is removed or restored)",
                True,
            )
        return None, True
