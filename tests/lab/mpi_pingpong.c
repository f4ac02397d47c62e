/* Two ranks: rank 0 sends a 1 MiB buffer to rank 1, which checks every byte and sends it back. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int rank, size, n = 1 << 20, bad = 0;
    char host[256];
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof host);
    unsigned char *buf = malloc(n);
    if (rank == 0) {
        for (int i = 0; i < n; i++) buf[i] = (unsigned char)(i * 7 + 3);
        MPI_Send(buf, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
        memset(buf, 0, n);
        MPI_Recv(buf, n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else if (rank == 1) {
        MPI_Recv(buf, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(buf, n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    }
    if (rank == 0)
        for (int i = 0; i < n; i++) bad += buf[i] != (unsigned char)(i * 7 + 3);
    printf("rank %d of %d on %s: %s\n", rank, size, host, rank == 0 ? (bad ? "MISMATCH" : "buffer round trip ok") : "echoed");
    MPI_Finalize();
    return bad != 0;
}
