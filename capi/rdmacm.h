/* The rdmacm glue's header: the C objects behind the librdmacm ABI
 * (rdmacm.c, rdmacm_ep.c, rdmacm.go). It builds on the verbs glue (capi.h,
 * included here, as <rdma/rdma_cma.h> includes <infiniband/verbs.h>), which
 * never calls back into it.
 *
 * C owns the structs the ABI fixes, each with the public struct first:
 *   struct rdma_event_channel *  in struct gcm_channel  (h: *rdmacm.Channel)
 *   struct rdma_cm_id *          in struct gcm_id       (h: *rdmacm.ID)
 *   struct rdma_cm_event *       in struct gcm_event    (inline private data)
 * Go names ids to C by rdmacm.ID.Cookie (the struct gcm_id address) and C
 * names them to Go by the handle h. Go exports are goCM*; C helpers gcm_*.
 */
#ifndef GCM_RDMACM_H
#define GCM_RDMACM_H

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>
#include <rdma/rdma_cma.h>

#include "capi.h"

#define GCM_PDATA_MAX 256

struct gcm_channel {
	struct rdma_event_channel ch; /* { int fd; } : an eventfd */
	uintptr_t h;
	const void *core; /* &gcapi_core_mark of the copy that made it */
	/* Threads inside rdma_get_cm_event, and whether the application
	 * destroyed the channel meanwhile: the last one out releases it. */
	pthread_mutex_t mu;
	int readers, destroyed;
};

struct gcm_id {
	struct rdma_cm_id id;
	uintptr_t h;
	const void *core; /* &gcapi_core_mark of the copy that made it */
	int sync; /* created with a NULL channel: calls wait for their event */
	uint8_t initiator_depth, responder_resources; /* from the request */
	struct ibv_qp_init_attr *qp_init_attr; /* rdma_create_ep, passive */
	void *connect;                         /* rdma_create_ep: ai_connect */
	size_t connect_len;
};

struct gcm_event {
	struct rdma_cm_event event;
	uintptr_t owner; /* handle of the id whose destroy waits for the ack */
	uint8_t private_data[GCM_PDATA_MAX];
};

/* What Go reports about an id: addresses and device. */
struct gcm_addrs {
	struct sockaddr_storage src, dst;
	char dev[64];
};

/* What Go fills in for one popped event. */
struct gcm_evinfo {
	int event;
	int status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	uintptr_t owner;
	uint8_t responder_resources, initiator_depth;
	uint8_t pdata_len;
	uint8_t pdata[GCM_PDATA_MAX];
	struct gcm_addrs addrs;
};

/* The rdma_* error convention: -1 with errno set (verbs return the errno). */
static inline int gcm_err(int e)
{
	errno = e;
	return -1;
}

static inline struct gcm_id *gcm_id_of(struct rdma_cm_id *id)
{
	return (struct gcm_id *)id;
}

/* Made by another copy of the core (capi.h: gcapi_core_mark): a forked
 * child's calls on its parent's ids and channels fail with EPERM. */
static inline int gcm_foreign_id(struct rdma_cm_id *id)
{
	return id && gcm_id_of(id)->core != &gcapi_core_mark;
}

static inline int gcm_foreign_channel(struct rdma_event_channel *ch)
{
	return ch && ((struct gcm_channel *)ch)->core != &gcapi_core_mark;
}

/* rdmacm.c, called from Go: a new id for a connection request on listen. */
struct rdma_cm_id *gcm_new_child(struct rdma_cm_id *listen, uintptr_t h);

#endif
