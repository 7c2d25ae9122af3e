"""What lies on the disk on the way to where a URI maps, checked before anything is written
there (`mirror.Mirror`'s guard; the rules are the mirror module's docstring's last point):
the state directory, a symbolic link out of the mapping directory or into the state, a file
where a directory is needed and a directory where the file should be are refused
(`UnsafePath`). The URI itself was mapped by `paths.UriMap` first.

The directories found safe are remembered for the run (we only ever create directories and
regular files), so a sync of many files in one folder pays for the walk up its path once.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ResourceSyncError
from .paths import STATE_DIR_NAME, Root, UnsafePath, is_within

__all__ = ["DiskGuard"]


class DiskGuard:
    """The checks for one run of the copy under `dest` (its state in `state_dir`)."""

    def __init__(self, dest: Path, state_dir: Path, *, dry_run: bool) -> None:
        self.dest = dest
        self.state_dir = state_dir
        self.dry_run = dry_run
        self._state_str = str(state_dir)
        self._state_prefix = self._state_str.rstrip(os.sep) + os.sep
        #: The state directory's real path (nothing resolves into it).
        self.state_real = os.path.realpath(state_dir)
        #: Directories found safe, with their real paths.
        self._safe_dirs: dict[str, str] = {}
        #: The directories this run created: what is in them is what it put there (files
        #: by O_EXCL and rename, and these directories), so a name there needs no `lstat`.
        self._made_dirs: set[str] = set()
        self._roots_real: dict[Path, str] = {}

    def known_dir(self, directory: str, root: Root) -> bool:
        """Whether `directory` is there and was checked (`check` remembers directories)."""
        return directory in self._safe_dirs or (
            directory == root.text and root.directory in self._roots_real
        )

    def made(self, directory: str) -> None:
        """This run created `directory` (see `_made_dirs`)."""
        self._made_dirs.add(directory)

    def check_state_dir(self, *, create: bool) -> None:
        """The state directory must be a real directory inside DEST: a symbolic link planted
        there would have the state written (or read) elsewhere (issue 17.8). Created when
        missing and `create` is set."""
        path = self.state_dir
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            if create and not self.dry_run:
                try:
                    os.mkdir(path, 0o755)
                except OSError as exc:
                    raise ResourceSyncError(
                        f"cannot create the state directory: {exc.strerror or exc}",
                        source=str(path),
                    ) from None
            return
        except OSError as exc:
            raise ResourceSyncError(
                f"cannot use the state directory: {exc.strerror or exc}", source=str(path)
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise ResourceSyncError(
                f"a symbolic link (to {os.readlink(path)}), where the state must live inside DEST: "
                "remove the link",
                source=str(path),
            )
        if not stat.S_ISDIR(st.st_mode):
            raise ResourceSyncError(
                "not a directory, where the state must live: move it away",
                source=str(path),
            )

    def checked(self, uri: str, path: str, root: Root, *, name: bool = True) -> None:
        """`check`, its refusal naming `uri`."""
        try:
            self.check(path, root, name=name)
        except UnsafePath as exc:
            if exc.source is None:
                exc.source = uri
            raise

    def check(self, path: str | Path, root: Root, *, name: bool = True) -> None:
        """Refuse the state directory, symlinks out of the root, and file/directory conflicts
        (on the way to `path`, and at `path` itself unless `name` is False).

        A directory found safe is remembered for the rest of the run (we only ever create
        directories and regular files; a directory is checked again if it did not exist yet),
        so a sync of many files in one folder pays for the walk up its path once.
        """
        target = os.fspath(path)
        if target.startswith(self._state_prefix) or target == self._state_str:
            raise UnsafePath(f"would land in the state directory {STATE_DIR_NAME}")
        try:
            parent = os.path.dirname(target)
            if parent not in self._safe_dirs:
                self._parents(path, parent, root)
            if not name:
                return
            if parent in self._made_dirs:
                # (A first baseline's every file: the `lstat` of a name not there, and the
                # exception it raises, were 1–2 % of a sync's CPU.)
                if target in self._made_dirs:
                    raise UnsafePath(f"{path} conflicts with an existing directory")
                return
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                return
            if stat.S_ISDIR(st.st_mode):
                raise UnsafePath(f"{path} conflicts with an existing directory")
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(target)
                if not is_within(real, self.root_real(root)):
                    raise UnsafePath(
                        f"a symlink would take {path} out of {root.directory} (to {real})"
                    )
                if is_within(real, self.state_real):
                    raise UnsafePath(f"would land in the state directory {STATE_DIR_NAME}")
                if os.path.isdir(real):
                    raise UnsafePath(f"{path} conflicts with an existing directory")
        except OSError as exc:
            raise UnsafePath(f"cannot check {path}: {exc.strerror or exc}") from None

    def _parents(self, path: str | Path, parent: str, root: Root) -> None:
        """Walk down from the root to `parent`, one `lstat` for each directory not yet known:
        a file where a directory is needed, or a symlink out of the root or into the state, is
        refused; each directory found safe is remembered with its real path. Below the first
        missing one nothing exists, so nothing there can lead elsewhere."""
        root_dir = str(root.directory)
        real = self.root_real(root)
        current = root_dir
        rest = parent[len(root_dir) :].strip("/").split("/") if parent != root_dir else []
        for i, seg in enumerate(rest):
            current = f"{current}/{seg}" if current != "/" else f"/{seg}"
            known = self._safe_dirs.get(current)
            if known is not None:
                real = known
                continue
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                below = os.path.join(real, *rest[i:])
                if is_within(below, self.state_real):
                    raise UnsafePath(
                        f"would land in the state directory {STATE_DIR_NAME}"
                    ) from None
                return
            if stat.S_ISLNK(st.st_mode):
                real = os.path.realpath(current)
                if not is_within(real, self.root_real(root)):
                    raise UnsafePath(
                        f"a symlink would take {path} out of {root.directory} (to {real})"
                    )
                if not os.path.isdir(real):
                    raise UnsafePath(f"{current} conflicts with an existing file")
            elif stat.S_ISDIR(st.st_mode):
                real = f"{real}/{seg}" if real != "/" else f"/{seg}"
            else:
                raise UnsafePath(f"{current} conflicts with an existing file")
            if is_within(real, self.state_real):
                raise UnsafePath(f"would land in the state directory {STATE_DIR_NAME}")
            self._safe_dirs[current] = real

    def root_real(self, root: Root) -> str:
        real = self._roots_real.get(root.directory)
        if real is None:
            try:
                real = os.path.realpath(root.directory)
            except OSError as exc:
                raise UnsafePath(f"cannot check {root.directory}: {exc}") from None
            if root.inside_dest and not is_within(real, str(self.dest)):
                raise UnsafePath(
                    f"mapping directory {root.directory} is a symlink out of DEST (to {real})"
                )
            # Kept once the directory is there (a missing one may yet be created, by us or
            # as a symlink), or for a dry run, which creates nothing: a dry run into an empty
            # DEST resolved the root again for every resource.
            if self.dry_run or os.path.isdir(root.directory):
                self._roots_real[root.directory] = real
        return real
