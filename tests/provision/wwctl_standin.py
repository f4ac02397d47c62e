"""A stand-in ``wwctl`` for the Warewulf export's tests: a script first on PATH that a real ``sh``
runs. Each call is checked against :data:`gpuforge.provision.warewulf.WWCTL` (the flag table cited
from Warewulf's cobra definitions): the subcommand, every ``--flag=value`` or bare ``--switch``, and
the number of positional arguments; ``image import SOURCE`` must be a file, as Warewulf's
``util.IsFile(source)`` requires for an archive. A call that passes is recorded as one JSON line
(subcommand, flags, arguments, cwd; an imported file's SHA-256); one that fails exits 1 with the
reason, as cobra does for an unknown flag. Not Warewulf: nothing is imported or configured.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from gpuforge.provision.warewulf import WWCTL

STANDIN = r"""
import hashlib, json, os, sys

table = json.load(open(os.environ["WWCTL_TABLE"]))
args = sys.argv[1:]
words = " ".join(args[:2])
if words not in table:
    sys.exit(f"Error: unknown command {words!r} for wwctl")
known = table[words]
flags, rest = {}, []
for a in args[2:]:
    if a.startswith("--"):
        name, eq, value = a[2:].partition("=")
        if (eq and name not in known["flags"]) or (not eq and name not in known["switches"]):
            sys.exit(f"Error: unknown flag: {a}")
        flags[name] = value if eq else None
    elif a.startswith("-"):
        sys.exit(f"Error: unknown shorthand flag in {a}")
    else:
        rest.append(a)
if len(rest) < known["min"] or (known["max"] is not None and len(rest) > known["max"]):
    sys.exit(f"Error: wrong number of arguments for wwctl {words}: {len(rest)}")
call = {"command": words, "flags": flags, "args": rest, "cwd": os.getcwd()}
if words == "image import":
    if not os.path.isfile(rest[0]):
        sys.exit(f"invalid dir or uri: {rest[0]}")
    call["sha256"] = hashlib.sha256(open(rest[0], "rb").read()).hexdigest()
with open(os.environ["WWCTL_LOG"], "a") as log:
    log.write(json.dumps(call) + "\n")
"""


class StandIn:
    """The stand-in under ``root``: ``bin/wwctl``, the flag table as JSON, the log of calls."""

    def __init__(self, root: Path) -> None:
        self.bin = root / "bin"
        self.bin.mkdir(parents=True)
        self.table, self.log = root / "wwctl-table.json", root / "wwctl.log"
        table = {
            " ".join(words): {"flags": sorted(c.flags), "switches": sorted(c.switches), "min": c.min_args,
                              "max": c.max_args}
            for words, c in WWCTL.items()
        }  # fmt: skip
        self.table.write_text(json.dumps(table))
        tool = self.bin / "wwctl"
        tool.write_text(f"#!{sys.executable}\n{STANDIN}")
        tool.chmod(0o755)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        return {**base, "PATH": f"{self.bin}:{base['PATH']}", "WWCTL_TABLE": str(self.table),
                "WWCTL_LOG": str(self.log)}  # fmt: skip

    def calls(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]
