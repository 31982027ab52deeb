/* goiwarp's own extensions (include/goiwarp.h): argument checks and the
 * descriptor's life in C, the work in Go (export_ext.go). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <goiwarp.h>

#include "capi.h"
#include "_cgo_export.h"

/* Checks fd before Go sees it, so the documented "nothing happened" errors
 * come from here. */
static int gcapi_check_stream_socket(int fd)
{
	int v;
	socklen_t len = sizeof(v);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);

	if (fd < 0 || fcntl(fd, F_GETFD) < 0)
		return EBADF;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &v, &len) < 0)
		return errno == ENOTSOCK ? ENOTSOCK : EBADF;
	if (v != SOCK_STREAM)
		return EPROTONOSUPPORT;
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &v, &len) < 0 || (v != AF_INET && v != AF_INET6))
		return EPROTONOSUPPORT;
	len = sizeof(v);
	if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &v, &len) == 0 && v != IPPROTO_TCP)
		return EPROTONOSUPPORT;
	if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
		return ENOTCONN;
	return 0;
}

int giw_qp_attach_socket(struct ibv_qp *qp, int fd, int initiator, const struct giw_conn_param *param,
			 struct giw_peer_param *peer, int timeout_ms)
{
	const void *pd = NULL;
	int pd_len = 0, ird = 1, ord = 1, flags, e;

	if (!qp || gcapi_qp_handle(qp) == 0)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(qp))
		return gcapi_err(EPERM);
	if (param) {
		if (param->reserved || (param->private_data_len && !param->private_data) ||
		    param->private_data_len > GIW_MPA_MAX_PRIVATE_DATA)
			return gcapi_err(EINVAL);
		pd = param->private_data;
		pd_len = param->private_data_len;
		if (param->responder_resources)
			ird = param->responder_resources;
		if (param->initiator_depth)
			ord = param->initiator_depth;
	}
	e = goGiwCheckAttachable(gcapi_qp_handle(qp));
	if (!e)
		e = gcapi_check_stream_socket(fd);
	if (e)
		return gcapi_err(e);
	if (peer)
		memset(peer, 0, sizeof(*peer));
	/* Go's copy of the socket shares the open file description, and Go
	 * makes it non-blocking: restore the caller's flags on failure. */
	flags = fcntl(fd, F_GETFL);
	e = goGiwAttachSocket(gcapi_qp_handle(qp), fd, initiator, (void *)pd, pd_len, ird, ord, timeout_ms,
			      peer);
	if (e) {
		if (flags >= 0)
			(void)fcntl(fd, F_SETFL, flags);
		return gcapi_err(e);
	}
	/* The library owns the connection now, on its own descriptor. */
	close(fd);
	return 0;
}

int giw_qp_disconnect(struct ibv_qp *qp)
{
	int e;

	if (!qp || gcapi_qp_handle(qp) == 0)
		return gcapi_err(EINVAL);
	if (gcapi_foreign(qp))
		return gcapi_err(EPERM);
	e = goGiwDisconnect(gcapi_qp_handle(qp));
	return e ? gcapi_err(e) : 0;
}

int giw_query_provider(struct ibv_context *ctx, struct giw_provider_attr *attr)
{
	if (!ctx || !attr || gcapi_context_handle(ctx) == 0)
		return gcapi_err(EINVAL);
	if (gcapi_foreign_ctx(ctx))
		return gcapi_err(EPERM);
	goGiwQueryProvider(attr);
	return 0;
}

int giw_query_counters(struct ibv_context *ctx, struct giw_counters *counters)
{
	int e;

	if (!ctx || !counters || gcapi_context_handle(ctx) == 0)
		return gcapi_err(EINVAL);
	if (gcapi_foreign_ctx(ctx))
		return gcapi_err(EPERM);
	e = goGiwQueryCounters(gcapi_context_handle(ctx), counters);
	return e ? gcapi_err(e) : 0;
}

int giw_query_runtime(struct giw_runtime *rt)
{
	if (!rt)
		return gcapi_err(EINVAL);
	goGiwQueryRuntime(rt);
	return 0;
}
