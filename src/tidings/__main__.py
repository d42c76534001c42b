"""``python -m tidings`` and the ``tidings`` command (``[project.scripts]``): the
command line, imported with the cyclic garbage collector off.

Every ``tidings`` process imports most of the package before it does anything: the
settings models, the runtime, every command. That builds a few hundred thousand objects,
none of them garbage, and CPython's collector walked them over and over while they were
made (a dozen young collections and a full one: about an eighth of a 0.4 s start, on
every worker restarted after a crash and every operator command). The collector is off
while the command line imports and what it built is then frozen out of its sight
(``gc.freeze``, as a serving process does again with what it builds before serving:
``tidings.processes.gc_tuning``); it runs as usual from there on.
"""

from __future__ import annotations

import gc


def main() -> None:
    enabled = gc.isenabled()
    gc.disable()
    try:
        from tidings.cli import main as cli_main

        gc.freeze()
    finally:
        if enabled:
            gc.enable()
    cli_main()


if __name__ == "__main__":
    main()
