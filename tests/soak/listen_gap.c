/* Preloaded into a perftest -R server (with libgoiwarp after it): delays its
 * second rdma_listen -- the data listener, opened after the control
 * connection's handshake -- by GIW_LISTEN_GAP_MS (default 300), as a loaded
 * machine does at random. The client connects in that gap and must not fail
 * (goiwarp retries a refused connect: GOIWARP_CONNECT_RETRY). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

struct rdma_cm_id;

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	static int calls;
	int (*next)(struct rdma_cm_id *, int) = (int (*)(struct rdma_cm_id *, int))dlsym(RTLD_NEXT, "rdma_listen");
	const char *ms = getenv("GIW_LISTEN_GAP_MS");

	if (__atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) == 2) {
		long gap = ms ? atol(ms) : 300;
		struct timespec ts = {gap / 1000, gap % 1000 * 1000000};

		nanosleep(&ts, NULL);
	}
	return next(id, backlog);
}
