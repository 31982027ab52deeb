/* mpi_check: what an MPI job asks of the fabric, each result checked.
 *
 *   ping-pong between ranks 0 and 1, 1 B to 4 MiB, the payload rewritten
 *   and verified every round trip (a row per size: one-way latency, MB/s);
 *   a ring of non-blocking sends, 64 messages of 64 KiB in flight per rank;
 *   MPI_Bcast of 1 MiB, MPI_Allreduce, MPI_Alltoall of 16 KiB blocks.
 *
 * Rank 0 prints "mpi_check: ok" and exits 0 when every byte and sum was
 * right; otherwise it names what was wrong and the job exits 1. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int errors;

static void fail(int rank, const char *what, size_t at)
{
	if (errors++ < 10)
		fprintf(stderr, "mpi_check: rank %d: %s wrong at %zu\n", rank, what, at);
}

static unsigned char pattern(size_t i, unsigned seed) { return (unsigned char)(i * 131 + seed * 7 + (i >> 8)); }

static void pingpong(int rank)
{
	const size_t max = 4u << 20;
	unsigned char *b = malloc(max);

	for (size_t sz = 1; sz <= max; sz *= 4) {
		int iters = sz >= (1u << 20) ? 10 : sz >= 65536 ? 50 : 500;
		double t0 = MPI_Wtime();

		for (int i = 0; i < iters; i++) {
			unsigned seed = (unsigned)(sz + i);

			if (rank == 0) {
				for (size_t j = 0; j < sz; j++)
					b[j] = pattern(j, seed);
				MPI_Send(b, (int)sz, MPI_BYTE, 1, i, MPI_COMM_WORLD);
				MPI_Recv(b, (int)sz, MPI_BYTE, 1, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (size_t j = 0; j < sz; j++)
					if (b[j] != (unsigned char)~pattern(j, seed)) {
						fail(rank, "ping-pong answer", j);
						break;
					}
			} else if (rank == 1) {
				MPI_Recv(b, (int)sz, MPI_BYTE, 0, i, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
				for (size_t j = 0; j < sz; j++) {
					if (b[j] != pattern(j, seed)) {
						fail(rank, "ping-pong request", j);
						break;
					}
				}
				for (size_t j = 0; j < sz; j++)
					b[j] = (unsigned char)~b[j];
				MPI_Send(b, (int)sz, MPI_BYTE, 0, i, MPI_COMM_WORLD);
			}
		}
		if (rank == 0) {
			double t = (MPI_Wtime() - t0) / iters / 2;
			printf("pingpong %zu bytes: %.2f usec one way, %.2f MB/s\n", sz, t * 1e6, sz / t / 1e6);
		}
	}
	free(b);
}

static void ring(int rank, int n)
{
	enum { MSGS = 64, LEN = 65536 };
	unsigned char *out = malloc((size_t)MSGS * LEN), *in = malloc((size_t)MSGS * LEN);
	MPI_Request req[2 * MSGS];
	int next = (rank + 1) % n, prev = (rank + n - 1) % n;

	for (size_t j = 0; j < (size_t)MSGS * LEN; j++)
		out[j] = pattern(j, (unsigned)rank);
	for (int m = 0; m < MSGS; m++) {
		MPI_Irecv(in + (size_t)m * LEN, LEN, MPI_BYTE, prev, m, MPI_COMM_WORLD, &req[m]);
		MPI_Isend(out + (size_t)m * LEN, LEN, MPI_BYTE, next, m, MPI_COMM_WORLD, &req[MSGS + m]);
	}
	MPI_Waitall(2 * MSGS, req, MPI_STATUSES_IGNORE);
	for (size_t j = 0; j < (size_t)MSGS * LEN; j++)
		if (in[j] != pattern(j, (unsigned)prev)) {
			fail(rank, "ring message", j);
			break;
		}
	free(out);
	free(in);
}

static void collectives(int rank, int n)
{
	const size_t bc = 1u << 20, blk = 16384;
	unsigned char *b = malloc(bc), *s = malloc(blk * n), *r = malloc(blk * n);
	long v = rank + 1, sum = 0;

	for (size_t j = 0; j < bc; j++)
		b[j] = rank == 0 ? pattern(j, 99) : 0;
	MPI_Bcast(b, (int)bc, MPI_BYTE, 0, MPI_COMM_WORLD);
	for (size_t j = 0; j < bc; j++)
		if (b[j] != pattern(j, 99)) {
			fail(rank, "bcast", j);
			break;
		}
	MPI_Allreduce(&v, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	if (sum != (long)n * (n + 1) / 2)
		fail(rank, "allreduce sum", 0);
	for (int p = 0; p < n; p++)
		for (size_t j = 0; j < blk; j++)
			s[p * blk + j] = pattern(j, (unsigned)(rank * 64 + p));
	MPI_Alltoall(s, (int)blk, MPI_BYTE, r, (int)blk, MPI_BYTE, MPI_COMM_WORLD);
	for (int p = 0; p < n; p++)
		for (size_t j = 0; j < blk; j++)
			if (r[p * blk + j] != pattern(j, (unsigned)(p * 64 + rank))) {
				fail(rank, "alltoall block", p * blk + j);
				p = n;
				break;
			}
	free(b);
	free(s);
	free(r);
}

int main(int argc, char **argv)
{
	int rank, n, total;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (n < 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_check: needs at least 2 ranks\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	pingpong(rank);
	ring(rank, n);
	collectives(rank, n);
	MPI_Allreduce(&errors, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0) {
		if (total)
			printf("mpi_check: FAIL: %d errors over %d ranks\n", total, n);
		else
			printf("mpi_check: ok: %d ranks, ping-pong, ring, bcast, allreduce, alltoall checked\n", n);
	}
	MPI_Finalize();
	return total != 0;
}
