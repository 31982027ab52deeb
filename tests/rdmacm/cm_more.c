/* More C tests of the librdmacm ABI of libgoiwarp: cm_more <case>.
 *   mpa_timeout  a peer that accepts TCP but never answers MPA: UNREACHABLE, bounded
 *   many         100 concurrent connects on one channel, O_NONBLOCK + poll()
 *   disc_both    rdma_disconnect from both sides at once: both DISCONNECTED, no error
 *   reader_teardown  a thread waits in rdma_get_cm_event while another disconnects and
 *                destroys the id and the channel without reading the events (rping's
 *                client does): the waiting thread keeps waiting, never fails (EBADF)
 * Listeners use ports in 24100-24199. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "giw_test.h"
#include "giw_cm.h"

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = {.cap = {.max_send_wr = 4, .max_recv_wr = 4,
					     .max_send_sge = 1, .max_recv_sge = 1},
				     .qp_type = IBV_QPT_RC};

	REQUIRE(id->verbs != NULL);
	REQUIRE(rdma_create_qp(id, NULL, &a) == 0);
}

/* GOIWARP_MPA_TIMEOUT is set to 500ms in main before the library is used
 * (and by ctest's ENVIRONMENT). */
static int t_mpa_timeout(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_event *e;
	struct rdma_cm_id *id;
	struct sockaddr_in sa;
	int s = socket(AF_INET, SOCK_STREAM, 0), port, one = 1;
	double t0, dt;

	REQUIRE(s >= 0);
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	for (port = 24100; port < 24120; port++) {
		giw_sin_lo(port, &sa);
		if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			break;
	}
	REQUIRE(port < 24120);
	REQUIRE(listen(s, 4) == 0); /* the kernel completes the handshake; nobody ever answers */
	id = giw_resolve_lo(ch, port);
	make_qp(id);
	t0 = (giw_now() * 1e3);
	REQUIRE(rdma_connect(id, NULL) == 0);
	e = giw_expect_cm(ch, RDMA_CM_EVENT_UNREACHABLE, 5000);
	dt = (giw_now() * 1e3) - t0;
	fprintf(stderr, "UNREACHABLE after %.0f ms, status %d\n", dt, e->status);
	REQUIRE(e->status < 0);
	REQUIRE(dt >= 300 && dt < 3000);
	rdma_ack_cm_event(e);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	close(s);
	return 0;
}

#define NCONN 100
static int SRV, CLI;

static int t_many(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *lid, *cli[NCONN], *srv[NCONN];
	struct sockaddr_in sa;
	int port, nsrv = 0, cli_est = 0, srv_est = 0, cli_disc = 0, srv_disc = 0;
	double deadline = (giw_now() * 1e3) + 60000;

	REQUIRE(ch);
	REQUIRE(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0);
	port = giw_listen_range(ch, 24120, NCONN, &SRV, &lid);
	giw_sin_lo(port, &sa);
	for (int i = 0; i < NCONN; i++) {
		REQUIRE(rdma_create_id(ch, &cli[i], &CLI, RDMA_PS_TCP) == 0);
		REQUIRE(rdma_resolve_addr(cli[i], NULL, (struct sockaddr *)&sa, 5000) == 0);
	}
	while (cli_est < NCONN || srv_est < NCONN) {
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		struct rdma_cm_event *e;
		int r = poll(&p, 1, 1000);

		REQUIRE(r >= 0);
		if ((giw_now() * 1e3) > deadline) {
			fprintf(stderr, "timeout: %d client and %d server ESTABLISHED\n", cli_est, srv_est);
			return 1;
		}
		while (rdma_get_cm_event(ch, &e) == 0) {
			struct rdma_cm_id *id = e->id;

			switch (e->event) {
			case RDMA_CM_EVENT_ADDR_RESOLVED:
				REQUIRE(id->context == &CLI);
				REQUIRE(rdma_resolve_route(id, 5000) == 0);
				break;
			case RDMA_CM_EVENT_ROUTE_RESOLVED:
				make_qp(id);
				REQUIRE(rdma_connect(id, NULL) == 0);
				break;
			case RDMA_CM_EVENT_CONNECT_REQUEST:
				REQUIRE(e->listen_id == lid && id->context == &SRV && nsrv < NCONN);
				srv[nsrv++] = id;
				make_qp(id);
				REQUIRE(rdma_accept(id, NULL) == 0);
				break;
			case RDMA_CM_EVENT_ESTABLISHED:
				if (id->context == &CLI)
					cli_est++;
				else
					srv_est++;
				break;
			default:
				fprintf(stderr, "unexpected %s (status %d)\n", rdma_event_str(e->event),
					e->status);
				return 1;
			}
			rdma_ack_cm_event(e);
		}
		REQUIRE(errno == EAGAIN);
	}
	REQUIRE(nsrv == NCONN);
	for (int i = 0; i < NCONN; i++)
		REQUIRE(rdma_disconnect(cli[i]) == 0);
	while (cli_disc < NCONN || srv_disc < NCONN) {
		struct pollfd p = {.fd = ch->fd, .events = POLLIN};
		struct rdma_cm_event *e;

		REQUIRE(poll(&p, 1, 1000) >= 0);
		if ((giw_now() * 1e3) > deadline) {
			fprintf(stderr, "timeout: %d client and %d server DISCONNECTED\n", cli_disc, srv_disc);
			return 1;
		}
		while (rdma_get_cm_event(ch, &e) == 0) {
			REQUIRE(e->event == RDMA_CM_EVENT_DISCONNECTED);
			if (e->id->context == &CLI)
				cli_disc++;
			else
				srv_disc++;
			rdma_ack_cm_event(e);
		}
		REQUIRE(errno == EAGAIN);
	}
	for (int i = 0; i < NCONN; i++) {
		rdma_destroy_qp(cli[i]);
		REQUIRE(rdma_destroy_id(cli[i]) == 0);
		rdma_destroy_qp(srv[i]);
		REQUIRE(rdma_destroy_id(srv[i]) == 0);
	}
	REQUIRE(rdma_destroy_id(lid) == 0);
	rdma_destroy_event_channel(ch);
	return 0;
}

/* Connects a client id on cch to the listener on port (events on sch), each
 * side with a QP; returns once both are established. */
static void connect_pair(struct rdma_event_channel *cch, struct rdma_event_channel *sch, int port,
			 struct rdma_cm_id **cid, struct rdma_cm_id **sid)
{
	struct rdma_cm_event *e;

	*cid = giw_resolve_lo(cch, port);
	make_qp(*cid);
	REQUIRE(rdma_connect(*cid, NULL) == 0);
	e = giw_expect_cm(sch, RDMA_CM_EVENT_CONNECT_REQUEST, 5000);
	*sid = e->id;
	rdma_ack_cm_event(e);
	make_qp(*sid);
	REQUIRE(rdma_accept(*sid, NULL) == 0);
	rdma_ack_cm_event(giw_expect_cm(cch, RDMA_CM_EVENT_ESTABLISHED, 5000));
	rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_ESTABLISHED, 5000));
}

static pthread_barrier_t disc_bar;
struct disc_arg {
	struct rdma_cm_id *id;
	int rc, err;
};

static void *disc_now(void *p)
{
	struct disc_arg *a = p;

	pthread_barrier_wait(&disc_bar);
	a->rc = rdma_disconnect(a->id);
	a->err = errno;
	return NULL;
}

static int t_disc_both(void)
{
	for (int round = 0; round < 10; round++) {
		struct rdma_event_channel *sch = rdma_create_event_channel(),
					  *cch = rdma_create_event_channel();
		struct rdma_cm_id *lid, *cid, *sid;
		struct rdma_cm_event *e;
		struct disc_arg a, b;
		pthread_t ta, tb;
		int port = giw_listen_range(sch, 24140, 4, NULL, &lid);

		connect_pair(cch, sch, port, &cid, &sid);

		pthread_barrier_init(&disc_bar, NULL, 2);
		a = (struct disc_arg){.id = cid};
		b = (struct disc_arg){.id = sid};
		pthread_create(&ta, NULL, disc_now, &a);
		pthread_create(&tb, NULL, disc_now, &b);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		pthread_barrier_destroy(&disc_bar);
		if (a.rc != 0 || b.rc != 0) {
			fprintf(stderr, "round %d: rdma_disconnect: client %d (%s), server %d (%s)\n", round,
				a.rc, strerror(a.err), b.rc, strerror(b.err));
			return 1;
		}
		e = giw_expect_cm(cch, RDMA_CM_EVENT_DISCONNECTED, 10000);
		REQUIRE(e->status == 0);
		rdma_ack_cm_event(e);
		e = giw_expect_cm(sch, RDMA_CM_EVENT_DISCONNECTED, 10000);
		REQUIRE(e->status == 0);
		rdma_ack_cm_event(e);
		/* exactly one DISCONNECTED each */
		{
			struct pollfd p[2] = {{.fd = cch->fd, .events = POLLIN}, {.fd = sch->fd, .events = POLLIN}};

			REQUIRE(poll(p, 2, 200) == 0);
		}
		REQUIRE(rdma_disconnect(cid) == 0 && rdma_disconnect(sid) == 0);
		rdma_destroy_qp(cid);
		rdma_destroy_qp(sid);
		REQUIRE(rdma_destroy_id(cid) == 0);
		REQUIRE(rdma_destroy_id(sid) == 0);
		REQUIRE(rdma_destroy_id(lid) == 0);
		rdma_destroy_event_channel(sch);
		rdma_destroy_event_channel(cch);
	}
	return 0;
}

static int reader_failures;

struct reader {
	struct rdma_event_channel *ch;
	pid_t tid;
};

static void *cm_reader(void *p)
{
	struct reader *r = p;
	struct rdma_cm_event *e;

	__atomic_store_n(&r->tid, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	if (rdma_get_cm_event(r->ch, &e)) {
		fprintf(stderr, "rdma_get_cm_event after teardown: %s\n", strerror(errno));
		__atomic_add_fetch(&reader_failures, 1, __ATOMIC_SEQ_CST);
		return NULL;
	}
	/* The client's DISCONNECTED may come before rdma_destroy_id drops it. The
	 * reader then leaves: calling again could meet the channel destroyed
	 * meanwhile, a use after free with any librdmacm. */
	rdma_ack_cm_event(e);
	return NULL;
}

/* Whether thread tid is blocked in read(2), i.e. inside rdma_get_cm_event. */
static int blocked_in_read(pid_t tid)
{
	char path[64];
	long nr = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)tid);
	if (!(f = fopen(path, "r")))
		return 0;
	if (fscanf(f, "%ld", &nr) != 1)
		nr = -1;
	fclose(f);
	return nr == SYS_read;
}

static struct reader *readers[50];

static int t_reader_teardown(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_cm_id *lid;
	int port = giw_listen_range(sch, 24160, 4, NULL, &lid);

	for (int round = 0; round < 50; round++) {
		struct rdma_event_channel *cch = rdma_create_event_channel();
		struct rdma_cm_id *cid, *sid;
		/* The reader outlives the round; readers[] keeps it reachable. */
		struct reader *r = readers[round] = calloc(1, sizeof(*r));
		pthread_t t;

		REQUIRE(r);
		r->ch = cch;
		connect_pair(cch, sch, port, &cid, &sid);
		REQUIRE(pthread_create(&t, NULL, cm_reader, r) == 0);
		REQUIRE(pthread_detach(t) == 0);
		for (double end = giw_now() * 1e3 + 5000; !__atomic_load_n(&r->tid, __ATOMIC_ACQUIRE) ||
						   !blocked_in_read(r->tid);)
			REQUIRE((giw_now() * 1e3) < end); /* the reader waits in rdma_get_cm_event */
		/* rping's client teardown: its CM thread still reads the channel. */
		REQUIRE(rdma_disconnect(cid) == 0);
		rdma_destroy_qp(cid);
		REQUIRE(rdma_destroy_id(cid) == 0);
		rdma_destroy_event_channel(cch);
		rdma_ack_cm_event(giw_expect_cm(sch, RDMA_CM_EVENT_DISCONNECTED, 10000));
		rdma_destroy_qp(sid);
		REQUIRE(rdma_destroy_id(sid) == 0);
	}
	REQUIRE(rdma_destroy_id(lid) == 0);
	rdma_destroy_event_channel(sch);
	/* The readers of the 50 destroyed channels wait on; one that failed has counted. */
	printf("reader_teardown: 50 rounds, %d reader(s) failed\n", reader_failures);
	return reader_failures != 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "";

	if (!strcmp(c, "mpa_timeout")) {
		setenv("GOIWARP_MPA_TIMEOUT", "500ms", 1); /* before the first use of the library */
		return t_mpa_timeout();
	}
	if (!strcmp(c, "many"))
		return t_many();
	if (!strcmp(c, "disc_both"))
		return t_disc_both();
	if (!strcmp(c, "reader_teardown"))
		return t_reader_teardown();
	fprintf(stderr, "usage: cm_more mpa_timeout | many | disc_both | reader_teardown\n");
	return 2;
}
