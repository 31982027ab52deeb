/* rdma_cm helpers of the C tests, beside giw_test.h (include that first). */
#ifndef GIW_CM_H
#define GIW_CM_H

#include <poll.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

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

/* 127.0.0.1:port. */
static inline void giw_sin_lo(int port, struct sockaddr_in *sa)
{
	memset(sa, 0, sizeof(*sa));
	sa->sin_family = AF_INET;
	sa->sin_port = htons(port);
	sa->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* An rdma listener (context ctx) on the first free loopback port of
 * [base, base+20), which it returns. */
static inline int giw_listen_range(struct rdma_event_channel *ch, int base, int backlog, void *ctx,
				   struct rdma_cm_id **lid)
{
	for (int port = base; port < base + 20; port++) {
		struct sockaddr_in sa;

		giw_sin_lo(port, &sa);
		REQUIRE(rdma_create_id(ch, lid, ctx, RDMA_PS_TCP) == 0);
		if (rdma_bind_addr(*lid, (struct sockaddr *)&sa) == 0 && rdma_listen(*lid, backlog) == 0)
			return port;
		rdma_destroy_id(*lid);
	}
	fprintf(stderr, "no free port in [%d, %d)\n", base, base + 20);
	exit(1);
}

/* A new id on ch with 127.0.0.1:port's address and route resolved. */
static inline struct rdma_cm_id *giw_resolve_lo(struct rdma_event_channel *ch, int port)
{
	struct sockaddr_in sa;
	struct rdma_cm_id *id;

	giw_sin_lo(port, &sa);
	REQUIRE(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sa, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(ch, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	REQUIRE(rdma_resolve_route(id, 2000) == 0);
	rdma_ack_cm_event(giw_expect_cm(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
	return id;
}

#endif
