"""Stand-ins for ``ssh``, perftest's ``ib_write_bw``/``ib_read_lat`` and ``srun``, for the pair test run through
gpuforge's real SSH transport and real ``sh``.

``ssh`` runs the remote command with ``sh -c`` as node ``NODE`` (its address mapped back to its name),
except the node program, which it answers with the node checks passed and the ``fabric.ports`` data
of the state. The perftest stub behaves as perftest does: a server (no address) starts listening after
``listen_delay`` seconds (never, for a node in ``dead``) and waits for its client; a client whose
server is not listening yet fails with perftest's own ``Couldn't connect to <addr>:18515``, so the
answers change while the client retries. The bandwidth of a pair is the state's ``bw["a->b"]``. A node in
``hang_up`` takes the node program's session but hangs up on every other (ssh exits 255, saying nothing).
Every call is logged (``<dir>/log``).
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

COMMON = r"""
import json, os, sys, time
D = os.environ["STUB_FABRIC"]
STATE = json.load(open(os.path.join(D, "state.json")))
def log(text):
    with open(os.path.join(D, "log"), "a") as f:
        f.write(f"{time.time():.3f} {text}\n")
"""

SSH = r"""
import subprocess
args = sys.argv[1:]
host, command = args[args.index("--") + 1], args[args.index("--") + 2]
node = STATE["hosts"][host]
stdin = sys.stdin.buffer.read()
if "python3 - " in command:
    ids = command.split("--checks ", 1)[1].split()[0].strip("'").split(",")
    results = [{"id": i, "layer": "hardware", "severity": "critical", "status": "pass", "message": "stub",
                "duration_s": 0.0} for i in ids]
    print(json.dumps({"results": results, "data": {"fabric.ports": STATE["ports"][node]}}))
    sys.exit(0)
log(f"ssh {node}")
if node in STATE.get("hang_up", []):  # the node's sshd closes the session at once: ssh exits 255, silent
    sys.exit(255)
env = dict(os.environ, NODE=node, PATH=D + ":" + os.environ["PATH"])
sys.exit(subprocess.run(["sh", "-c", command], env=env, input=stdin).returncode)
"""

PERFTEST = r"""
tool, node, args = os.path.basename(sys.argv[0]), os.environ["NODE"], sys.argv[1:]
address = args[-1] if args and not args[-1].startswith("-") and args[-2] not in ("-d", "-i", "-x", "-D", "-n") else None
length = "".join(f" {flag} {args[args.index(flag) + 1]}" for flag in ("-D", "-n") if flag in args)
mark = lambda kind, who: os.path.join(D, f"{kind}.{tool}.{who}")
TITLE = {"ib_write_bw": "RDMA_Write BW Test", "ib_read_lat": "RDMA_Read Latency Test"}[tool]
print("-" * 87)
print(f"                    {TITLE}")
print(f" Dual-port       : OFF          Device         : {args[args.index('-d') + 1]}")
if address is None:
    log(f"{node} {tool} server" + length)
    if node in STATE.get("dead", []):
        time.sleep(1)
        print(" Unable to find the Infiniband/RoCE device", file=sys.stderr)
        sys.exit(1)
    time.sleep(STATE.get("listen_delay", 1.0))
    open(mark("listen", node), "w").close()
    end = time.time() + 30
    while not os.path.exists(mark("done", node)) and time.time() < end:
        time.sleep(0.05)
    os.unlink(mark("listen", node))
    if os.path.exists(mark("done", node)):
        os.unlink(mark("done", node))
    sys.exit(0)
server = STATE["hosts"][address]
if not os.path.exists(mark("listen", server)):
    log(f"{node} {tool} client {address} refused")
    print(f"Couldn't connect to {address}:18515", file=sys.stderr)
    print(" Unable to set up socket connection", file=sys.stderr)
    sys.exit(1)
log(f"{node} {tool} client {address}" + length)
print("-" * 87)
if tool == "ib_write_bw":
    bw = STATE["bw"].get(f"{server}->{node}", STATE["bw"]["default"])
    print(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]")
    print(f" 65536      1000             0.00               {bw:<7.2f}\t\t   0.018715")
else:
    lat = STATE["lat"]
    print(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]"
          "   99% percentile[usec]   99.9% percentile[usec] ")
    print(f" 2       1000          {lat:.2f}         {lat + 5:.2f}       {lat:.2f}  \t       {lat:.2f}     \t"
          f"0.50\t\t{lat + 1:.2f} \t\t{lat + 2:.2f}")
print("-" * 87)
open(mark("done", server), "w").close()
"""

SRUN = r"""
log(f"{os.environ['NODE']} srun {' '.join(sys.argv[1:])}")
print(STATE["nccl_output"])
sys.exit(STATE.get("nccl_rc", 0))
"""


def install(directory: Path, state: dict[str, Any]) -> Path:
    """The stubs in ``directory`` (ssh, ib_write_bw, ib_read_lat, srun) with ``state``; the log's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "state.json").write_text(json.dumps(state))
    for name, body in (("ssh", SSH), ("ib_write_bw", PERFTEST), ("ib_read_lat", PERFTEST), ("srun", SRUN)):
        path = directory / name
        path.write_text(f"#!{sys.executable}\n{COMMON}\n{body}")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return directory / "log"
