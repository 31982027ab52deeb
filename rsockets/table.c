/* rsockets: the table from an rsocket's number (the fd of its CM event
 * channel, rsocket.c) to its struct grs. Lookups take no lock: pages are
 * published once and entries swapped atomically; insert and remove
 * serialise on the table lock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "rsocket.h"

#define GRS_PAGE 1024
#define GRS_PAGES 1024 /* fds below 2^20 */
static struct grs **grs_pages[GRS_PAGES];
static pthread_mutex_t grs_table_lock = PTHREAD_MUTEX_INITIALIZER;

/* Enters rs under its number rs->fd: 0, or -1 with errno. */
int grs_insert(struct grs *rs)
{
	unsigned fd = (unsigned)rs->fd, p = fd / GRS_PAGE;
	struct grs **page;

	if (rs->fd < 0 || p >= GRS_PAGES) {
		errno = EMFILE;
		return -1;
	}
	pthread_mutex_lock(&grs_table_lock);
	page = grs_pages[p];
	if (!page) {
		page = calloc(GRS_PAGE, sizeof(*page));
		if (!page) {
			pthread_mutex_unlock(&grs_table_lock);
			errno = ENOMEM;
			return -1;
		}
		__atomic_store_n(&grs_pages[p], page, __ATOMIC_RELEASE);
	}
	__atomic_store_n(&page[fd % GRS_PAGE], rs, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&grs_table_lock);
	return 0;
}

/* Takes rs out, if it is the rsocket under its number. */
void grs_remove(struct grs *rs)
{
	unsigned fd = (unsigned)rs->fd;
	struct grs **page;

	if (rs->fd < 0 || fd / GRS_PAGE >= GRS_PAGES)
		return;
	pthread_mutex_lock(&grs_table_lock);
	page = grs_pages[fd / GRS_PAGE];
	if (page && page[fd % GRS_PAGE] == rs)
		__atomic_store_n(&page[fd % GRS_PAGE], NULL, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&grs_table_lock);
}

/* The rsocket numbered fd, or NULL with errno EBADF. */
struct grs *grs_get(int fd)
{
	struct grs **page, *rs = NULL;

	if (fd >= 0 && (unsigned)fd / GRS_PAGE < GRS_PAGES) {
		page = __atomic_load_n(&grs_pages[(unsigned)fd / GRS_PAGE], __ATOMIC_ACQUIRE);
		if (page)
			rs = __atomic_load_n(&page[(unsigned)fd % GRS_PAGE], __ATOMIC_ACQUIRE);
	}
	if (!rs)
		errno = EBADF;
	return rs;
}
