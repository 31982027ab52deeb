/* A child forked after the core was loaded has no Go runtime (fork keeps one
 * thread) but copies of the parent's rings and sockets. The loader shim makes
 * every exported call fail there (capi/loader/shim.c); the ops an application
 * reaches without the shim -- context->ops and the extended ops the inline
 * verbs.h helpers call, ibv_wr_* -- check gcapi_in_forked_child() here. */
#include <pthread.h>

#include "capi.h"

int gcapi_forked;

static void mark_forked_child(void)
{
	gcapi_forked = 1; /* the only thread of the child */
}

__attribute__((constructor)) static void gcapi_fork_init(void)
{
	pthread_atfork(NULL, NULL, mark_forked_child);
}
