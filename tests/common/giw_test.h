/* Shared by the C tests (tests/CMakeLists.txt puts tests/common on the
 * include path): CHECK (counts a failure, goes on), REQUIRE (exits 1) and
 * open_lo (opens the giw_lo device or exits). Header-only.
 *
 * A test that runs several roles (parent/child, cli/srv) defines
 * GIW_TEST_ROLE before including this to an expression naming the role; its
 * messages then start with "[role] ". */
#ifndef GIW_TEST_H
#define GIW_TEST_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

#endif
