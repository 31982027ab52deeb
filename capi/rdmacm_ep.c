/* librdmacm ABI: the synchronous endpoint API (rdma_create_ep,
 * rdma_get_request, rdma_destroy_ep), rdma_getaddrinfo and the device list. */
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include "rdmacm.h"

/* ---- endpoints ------------------------------------------------------------ */

int rdma_create_ep(struct rdma_cm_id **id, struct rdma_addrinfo *res, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *qp_init_attr)
{
	struct rdma_cm_id *cm_id;
	struct gcm_id *g;
	int ret;

	if (!id || !res)
		return gcm_err(EINVAL);
	ret = rdma_create_id(NULL, &cm_id, NULL, res->ai_port_space);
	if (ret)
		return ret;
	g = gcm_id_of(cm_id);
	if (res->ai_flags & RAI_PASSIVE) {
		ret = rdma_bind_addr(cm_id, res->ai_src_addr);
		if (ret)
			goto err;
		if (pd)
			cm_id->pd = pd;
		if (qp_init_attr) {
			g->qp_init_attr = malloc(sizeof(*qp_init_attr));
			if (!g->qp_init_attr) {
				ret = gcm_err(ENOMEM);
				goto err;
			}
			*g->qp_init_attr = *qp_init_attr;
			g->qp_init_attr->qp_type = res->ai_qp_type;
		}
		goto out;
	}
	ret = rdma_resolve_addr(cm_id, res->ai_src_addr, res->ai_dst_addr, 2000);
	if (ret)
		goto err;
	ret = rdma_resolve_route(cm_id, 2000);
	if (ret)
		goto err;
	if (qp_init_attr) {
		qp_init_attr->qp_type = res->ai_qp_type;
		ret = rdma_create_qp(cm_id, pd, qp_init_attr);
		if (ret)
			goto err;
	}
	if (res->ai_connect_len) {
		g->connect = malloc(res->ai_connect_len);
		if (!g->connect) {
			ret = gcm_err(ENOMEM);
			goto err;
		}
		memcpy(g->connect, res->ai_connect, res->ai_connect_len);
		g->connect_len = res->ai_connect_len;
	}
out:
	*id = cm_id;
	return 0;
err:
	rdma_destroy_ep(cm_id);
	return ret;
}

void rdma_destroy_ep(struct rdma_cm_id *id)
{
	if (gcm_foreign_id(id))
		return;
	if (id->qp)
		rdma_destroy_qp(id);
	if (id->srq)
		rdma_destroy_srq(id);
	rdma_destroy_id(id);
}

int rdma_get_request(struct rdma_cm_id *listen, struct rdma_cm_id **id)
{
	struct gcm_id *g = gcm_id_of(listen);
	struct rdma_cm_event *event;
	int ret;

	if (gcm_foreign_id(listen))
		return gcm_err(EPERM);
	if (!listen || !id || !g->sync)
		return gcm_err(EINVAL);
	if (listen->event) {
		rdma_ack_cm_event(listen->event);
		listen->event = NULL;
	}
	ret = rdma_get_cm_event(listen->channel, &event);
	if (ret)
		return ret;
	if (event->status) {
		ret = gcm_err(event->status < 0 ? -event->status : event->status);
		goto err;
	}
	if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
		ret = gcm_err(EINVAL);
		goto err;
	}
	if (g->qp_init_attr) {
		struct ibv_qp_init_attr attr = *g->qp_init_attr;

		ret = rdma_create_qp(event->id, listen->pd, &attr);
		if (ret)
			goto err;
	}
	*id = event->id;
	(*id)->event = event;
	return 0;
err:
	listen->event = event;
	return ret;
}

/* ---- rdma_getaddrinfo ------------------------------------------------------ */

static struct sockaddr *gcm_dupaddr(const struct sockaddr *sa, socklen_t len)
{
	struct sockaddr *d = malloc(len);

	if (d)
		memcpy(d, sa, len);
	return d;
}

static int gcm_ai_error(int r)
{
	switch (r) {
	case EAI_MEMORY:
		return ENOMEM;
	case EAI_SYSTEM:
		return errno;
	case EAI_NONAME:
	case EAI_NODATA:
		return ENOENT;
	case EAI_SERVICE:
	case EAI_FAMILY:
	case EAI_BADFLAGS:
		return EINVAL;
	}
	return EADDRNOTAVAIL;
}

int rdma_getaddrinfo(const char *node, const char *service, const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	struct addrinfo ahints, *ai = NULL, *cur;
	struct rdma_addrinfo *head = NULL, **tail = &head;
	int flags = hints ? hints->ai_flags : 0;
	int ps = hints && hints->ai_port_space ? hints->ai_port_space : RDMA_PS_TCP;
	int qpt = hints && hints->ai_qp_type ? hints->ai_qp_type : IBV_QPT_RC;
	int r;

	if (!res)
		return gcm_err(EINVAL);
	if (ps != RDMA_PS_TCP && ps != RDMA_PS_IB)
		return gcm_err(EPROTONOSUPPORT); /* iWARP: TCP only */
	memset(&ahints, 0, sizeof(ahints));
	ahints.ai_socktype = SOCK_STREAM;
	ahints.ai_protocol = IPPROTO_TCP;
	if (flags & RAI_PASSIVE)
		ahints.ai_flags |= AI_PASSIVE;
	if (flags & RAI_NUMERICHOST)
		ahints.ai_flags |= AI_NUMERICHOST;
	if (hints && (flags & RAI_FAMILY || hints->ai_family))
		ahints.ai_family = hints->ai_family;

	if (!node && !service) {
		/* Only hints: an address pair the caller already has. */
		struct rdma_addrinfo *rai = calloc(1, sizeof(*rai));

		if (!rai || !hints)
			return free(rai), gcm_err(rai ? EINVAL : ENOMEM);
		rai->ai_flags = flags;
		rai->ai_family = hints->ai_family;
		rai->ai_qp_type = qpt;
		rai->ai_port_space = ps;
		if (hints->ai_src_len && hints->ai_src_addr) {
			rai->ai_src_addr = gcm_dupaddr(hints->ai_src_addr, hints->ai_src_len);
			rai->ai_src_len = hints->ai_src_len;
		}
		if (hints->ai_dst_len && hints->ai_dst_addr) {
			rai->ai_dst_addr = gcm_dupaddr(hints->ai_dst_addr, hints->ai_dst_len);
			rai->ai_dst_len = hints->ai_dst_len;
		}
		*res = rai;
		return 0;
	}

	r = getaddrinfo(node, service, &ahints, &ai);
	if (r)
		return gcm_err(gcm_ai_error(r));
	for (cur = ai; cur; cur = cur->ai_next) {
		struct rdma_addrinfo *rai;

		if (cur->ai_family != AF_INET && cur->ai_family != AF_INET6)
			continue;
		rai = calloc(1, sizeof(*rai));
		if (!rai)
			goto nomem;
		*tail = rai;
		tail = &rai->ai_next;
		rai->ai_flags = flags;
		rai->ai_family = cur->ai_family;
		rai->ai_qp_type = qpt;
		rai->ai_port_space = ps;
		if (flags & RAI_PASSIVE) {
			rai->ai_src_addr = gcm_dupaddr(cur->ai_addr, cur->ai_addrlen);
			if (!rai->ai_src_addr)
				goto nomem;
			rai->ai_src_len = cur->ai_addrlen;
			if (node && cur->ai_canonname)
				rai->ai_src_canonname = strdup(cur->ai_canonname);
		} else {
			rai->ai_dst_addr = gcm_dupaddr(cur->ai_addr, cur->ai_addrlen);
			if (!rai->ai_dst_addr)
				goto nomem;
			rai->ai_dst_len = cur->ai_addrlen;
			if (cur->ai_canonname)
				rai->ai_dst_canonname = strdup(cur->ai_canonname);
			if (hints && hints->ai_src_addr && hints->ai_src_len) {
				rai->ai_src_addr = gcm_dupaddr(hints->ai_src_addr, hints->ai_src_len);
				rai->ai_src_len = hints->ai_src_len;
			}
		}
	}
	freeaddrinfo(ai);
	if (!head)
		return gcm_err(EADDRNOTAVAIL);
	*res = head;
	return 0;
nomem:
	freeaddrinfo(ai);
	rdma_freeaddrinfo(head);
	return gcm_err(ENOMEM);
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	while (res) {
		struct rdma_addrinfo *next = res->ai_next;

		free(res->ai_src_addr);
		free(res->ai_dst_addr);
		free(res->ai_src_canonname);
		free(res->ai_dst_canonname);
		free(res->ai_route);
		free(res->ai_connect);
		free(res);
		res = next;
	}
}

/* ---- devices ------------------------------------------------------------- */

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_device **devs;
	struct ibv_context **list;
	int n = 0, i, k = 0;

	devs = ibv_get_device_list(&n);
	if (!devs)
		n = 0;
	list = calloc(n + 1, sizeof(*list));
	if (!list) {
		if (devs)
			ibv_free_device_list(devs);
		return gcapi_errp(ENOMEM);
	}
	for (i = 0; i < n; i++) {
		struct ibv_context *c = gcapi_open_device_by_name(ibv_get_device_name(devs[i]));

		if (c)
			list[k++] = c;
	}
	if (devs)
		ibv_free_device_list(devs);
	if (num_devices)
		*num_devices = k;
	return list;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list); /* the contexts are shared and stay open, as librdmacm's */
}
