/* The live-object registry (capi.h): CQs, QPs and SRQs by address, so that
 * an event queued for an object destroyed meanwhile is dropped instead of
 * handed out. objects.c adds and removes, the event readers (device.c,
 * objects.c) deliver. */
#include <stdlib.h>

#include "capi.h"

#define ATOMIC_ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)

#define LIVE_BUCKETS 1024
struct live_node {
	void *obj;
	struct live_node *next;
};
static struct live_node *live[LIVE_BUCKETS];
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

static unsigned live_hash(void *p)
{
	uint64_t x = (uintptr_t)p;

	x ^= x >> 17;
	x *= 0x9E3779B97F4A7C15ULL;
	return (unsigned)(x >> 54) & (LIVE_BUCKETS - 1);
}

void gcapi_live_add(void *obj)
{
	struct live_node *n = malloc(sizeof(*n));

	if (!n)
		return; /* events for it are then dropped: degraded, not unsafe */
	n->obj = obj;
	pthread_mutex_lock(&live_lock);
	n->next = live[live_hash(obj)];
	live[live_hash(obj)] = n;
	pthread_mutex_unlock(&live_lock);
}

void gcapi_live_del(void *obj)
{
	pthread_mutex_lock(&live_lock);
	for (struct live_node **pp = &live[live_hash(obj)]; *pp; pp = &(*pp)->next) {
		if ((*pp)->obj == obj) {
			struct live_node *n = *pp;
			*pp = n->next;
			free(n);
			break;
		}
	}
	pthread_mutex_unlock(&live_lock);
}

int gcapi_live_deliver(void *obj, uint32_t *delivered)
{
	int found = 0;

	pthread_mutex_lock(&live_lock);
	for (struct live_node *n = live[live_hash(obj)]; n; n = n->next) {
		if (n->obj == obj) {
			ATOMIC_ADD(delivered, 1);
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&live_lock);
	return found;
}
