/* What the C benchmark programs share: fail with a message naming the
 * program and its role, and a monotonic clock in seconds. Each program
 * defines bench_prog and bench_role. */
#ifndef GOIWARP_BENCHUTIL_H
#define GOIWARP_BENCHUTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern const char *bench_prog, *bench_role;

#define DIE(...)                                                                 \
	do {                                                                     \
		int e_ = errno;                                                  \
		fprintf(stderr, "%s %s: ", bench_prog, bench_role);              \
		fprintf(stderr, __VA_ARGS__);                                    \
		if (e_)                                                          \
			fprintf(stderr, " (errno %d %s)", e_, strerror(e_));     \
		fputc('\n', stderr);                                             \
		exit(1);                                                         \
	} while (0)

static inline double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#endif
