/* Shared by the C tests (tests/CMakeLists.txt puts tests/common on the
 * include path): CHECK (counts a failure, goes on), REQUIRE (exits 1),
 * open_lo (opens the giw_lo device or exits), and the process figures the
 * stress tests read (giw_now, giw_count_dir, giw_rss_kb). Header-only.
 * giw_cm.h has the rdma_cm helpers.
 *
 * A test that runs several roles (parent/child, cli/srv) defines
 * GIW_TEST_ROLE before including this to an expression naming the role; its
 * messages then start with "[role] ". */
#ifndef GIW_TEST_H
#define GIW_TEST_H

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#ifndef GIW_TEST_ROLE
#define GIW_TEST_ROLE NULL
#endif

/* Number of failed CHECKs; main returns non-zero if any. */
static int failures __attribute__((unused));

/* Prints "[role] file:line: KIND failed: cond (errno N text)". err is errno
 * as it was when cond failed. */
static inline void giw_test_report(const char *role, const char *file, int line, const char *kind,
				   const char *cond, int err)
{
	if (role)
		fprintf(stderr, "[%s] ", role);
	fprintf(stderr, "%s:%d: %s failed: %s (errno %d %s)\n", file, line, kind, cond, err,
		strerror(err));
}

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			giw_test_report(GIW_TEST_ROLE, __FILE__, __LINE__, "CHECK", #cond, errno);   \
			failures++;                                                              \
		}                                                                                \
	} while (0)

#define REQUIRE(cond)                                                                            \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			giw_test_report(GIW_TEST_ROLE, __FILE__, __LINE__, "REQUIRE", #cond, errno); \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

/* Opens giw_lo; exits if there is no device list or no giw_lo. */
static inline struct ibv_context *open_lo(void)
{
	int n = 0;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *ctx = NULL;

	REQUIRE(l != NULL);
	for (int i = 0; i < n; i++)
		if (strcmp(ibv_get_device_name(l[i]), "giw_lo") == 0)
			ctx = ibv_open_device(l[i]);
	ibv_free_device_list(l);
	REQUIRE(ctx != NULL);
	return ctx;
}

/* Seconds on the monotonic clock. */
static inline double giw_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Entries of a /proc directory (fds, tasks), "." and ".." not counted. */
static inline long giw_count_dir(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	long n = 0;

	REQUIRE(d != NULL);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* VmRSS of this process in kB. */
static inline long giw_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;

	REQUIRE(f != NULL);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
			break;
	fclose(f);
	return v;
}

#endif
