/* rdma_cm helpers of the C tests, beside giw_test.h (include that first). */
#ifndef GIW_CM_H
#define GIW_CM_H

#include <poll.h>

#include <rdma/rdma_cma.h>

/* The next event of ch within ms milliseconds, which must be of type t;
 * anything else ends the test (exit 1) with one line saying what came. */
static inline struct rdma_cm_event *giw_expect_cm(struct rdma_event_channel *ch, enum rdma_cm_event_type t,
						  int ms)
{
	struct pollfd p = {.fd = ch->fd, .events = POLLIN};
	struct rdma_cm_event *e;
	const char *role = GIW_TEST_ROLE;
	int r;

	while ((r = poll(&p, 1, ms)) < 0 && errno == EINTR)
		;
	if (r != 1) {
		fprintf(stderr, "%s%s%sno %s within %d ms\n", role ? "[" : "", role ? role : "", role ? "] " : "",
			rdma_event_str(t), ms);
		exit(1);
	}
	REQUIRE(rdma_get_cm_event(ch, &e) == 0);
	if (e->event != t) {
		fprintf(stderr, "%s%s%sgot %s (status %d), want %s\n", role ? "[" : "", role ? role : "",
			role ? "] " : "", rdma_event_str(e->event), e->status, rdma_event_str(t));
		exit(1);
	}
	return e;
}

#endif
