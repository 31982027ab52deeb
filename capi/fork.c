/* A child forked after the core was loaded has no Go runtime in this copy of
 * the core (fork keeps one thread) but copies of the parent's rings and
 * sockets. Its calls through the loader shim go to a copy of the core of its
 * own (capi/loader/shim.c), which refuses the parent's objects
 * (gcapi_foreign); the ops it reaches without the shim on the parent's
 * objects -- context->ops and the extended ops the inline verbs.h helpers
 * call, ibv_wr_* -- land in this copy and check gcapi_in_forked_child(). */
#include <pthread.h>

#include "capi.h"

int gcapi_forked;
const char gcapi_core_mark;

static void mark_forked_child(void)
{
	gcapi_forked = 1; /* the only thread of the child */
}

__attribute__((constructor)) static void gcapi_fork_init(void)
{
	pthread_atfork(NULL, NULL, mark_forked_child);
}
