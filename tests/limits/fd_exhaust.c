/* The process runs out of file descriptors after its first RDMA call, then
 * makes its first rdma_cm calls: they fail with EMFILE, and work again once
 * descriptors are free. Before the core started Go's netpoller with itself,
 * that first socket was where the runtime made its epoll and eventfd, and it
 * killed the process ("fatal error: runtime: netpollinit failed"). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#include "giw_test.h"

#define LIMIT 256

static int listen_once(struct rdma_event_channel *ch, struct rdma_cm_id **id)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	if (rdma_create_id(ch, id, NULL, RDMA_PS_TCP))
		return -1;
	if (rdma_bind_addr(*id, (struct sockaddr *)&sa) || rdma_listen(*id, 1)) {
		int e = errno;
		rdma_destroy_id(*id);
		errno = e;
		return -1;
	}
	return 0;
}

int main(void)
{
	struct rlimit lim = {LIMIT, LIMIT};
	int fds[LIMIT], n = 0, fd;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id;

	REQUIRE(setrlimit(RLIMIT_NOFILE, &lim) == 0);
	int ndev;
	ibv_free_device_list(ibv_get_device_list(&ndev)); /* the first call: the core starts */
	while (n < LIMIT && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
		fds[n++] = fd;
	REQUIRE(n < LIMIT && errno == EMFILE);

	errno = 0;
	CHECK(rdma_create_event_channel() == NULL && errno == EMFILE);
	/* Room for the channel and one more: too little for the id's socket and
	 * the runtime's epoll and eventfd, had they not been made yet. */
	close(fds[--n]);
	close(fds[--n]);
	REQUIRE((ch = rdma_create_event_channel()));
	errno = 0;
	CHECK(listen_once(ch, &id) == -1 && errno == EMFILE);

	while (n > 0)
		close(fds[--n]);
	CHECK(listen_once(ch, &id) == 0);
	printf("fd_exhaust: with descriptors out, EMFILE from rdma_create_event_channel and "
	       "rdma_listen; listening once they were back\n");
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	return failures ? 1 : 0;
}
