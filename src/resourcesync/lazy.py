"""Names a package exports from its modules, imported on first use (PEP 562): a command that
needs one part does not load the others (issue 15.5).

Ground floor: imports nothing of ours.
"""

from __future__ import annotations

# (typing is not imported at run time: this module is on the program's first steps, before
# it can answer a Ctrl-C; see `_program`.)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["exports"]


def exports(
    package: str, where: Mapping[str, str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: `where` maps each name to the module (relative to
    `package`) that defines it; a name once imported is kept in `namespace`."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        import importlib  # (here: the package's first steps are the program's, see `_program`)

        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
