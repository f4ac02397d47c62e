"""Two ranks: rank 0 sends a 1 MiB buffer to rank 1, which sends it back; rank 0 checks every byte.

Run by the VM test as ``srun --mpi=pmix -N2 -n2 python3 mpi_pingpong.py``: Debian's mpi4py on
Debian's Open MPI (libopenmpi3), started through Slurm's PMIx plugin, one rank on each VM.
"""

import socket
import sys

from mpi4py import MPI

N = 1 << 20
PATTERN = bytes((i * 7 + 3) % 256 for i in range(256)) * (N // 256)  # byte i is (i * 7 + 3) mod 256


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    buf = bytearray(N)
    bad = 0
    if rank == 0:
        buf[:] = PATTERN
        comm.Send([buf, MPI.BYTE], dest=1, tag=0)
        buf[:] = bytes(N)
        comm.Recv([buf, MPI.BYTE], source=1, tag=1)
        bad = 0 if buf == PATTERN else sum(a != b for a, b in zip(buf, PATTERN, strict=True))
    elif rank == 1:
        comm.Recv([buf, MPI.BYTE], source=0, tag=0)
        comm.Send([buf, MPI.BYTE], dest=0, tag=1)
    said = ("MISMATCH" if bad else "buffer round trip ok") if rank == 0 else "echoed"
    print(f"rank {rank} of {size} on {socket.gethostname()}: {said}", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
