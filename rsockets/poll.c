/* rsockets: rpoll and rselect.
 *
 * An rsocket is ready when its CQ says so, not its fd: rpoll first checks
 * every entry without sleeping (rsockets by processing their CQ, other fds
 * with poll(..., 0)), spins briefly, then arms each rsocket's CQ and sleeps
 * in poll(2) on the completion channel (connected), or on the CM event
 * channel (listening, connecting), beside the application's own fds. A wakeup
 * may carry only credits or a connection step, so it checks again and
 * sleeps again until something the caller asked for is ready or time is up.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <time.h>
#include <rdma/rsocket.h>

#include "rsocket.h"

static uint64_t grs_now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000u + (uint64_t)t.tv_nsec / 1000u;
}

static int grs_has_cq(const struct grs *rs)
{
	return rs->cq && (rs->state == GRS_CONNECTED || rs->state == GRS_CLOSED ||
			  rs->state == GRS_FAILED);
}

/* The events of rs; arm: leave its CQ armed for a sleep (never sleeps). */
static short grs_revents(struct grs *rs, short events, int arm)
{
	struct pollfd p;
	short rev = 0;

	if (rs->state == GRS_OPENING) {
		/* a step only when its event is there: a blocking rsocket's
		 * channel would make the step wait, and rpoll never waits here */
		p.fd = rs->ch->fd;
		p.events = POLLIN;
		p.revents = 0;
		if (poll(&p, 1, 0) <= 0 || (grs_do_connect(rs) && errno == EINPROGRESS))
			return 0;
	}
	if (grs_has_cq(rs)) {
		if (arm)
			grs_process(rs, 0, grs_cq_is_armed);
		else
			grs_process(rs, 1, grs_any);
		pthread_mutex_lock(&rs->cq_lock);
		if ((events & POLLIN) &&
		    (grs_have_data(rs) || !(rs->state == GRS_CONNECTED && rs->readable)))
			rev |= POLLIN;
		if ((events & POLLOUT) && grs_can_send(rs))
			rev |= POLLOUT;
		if (rs->state == GRS_CLOSED && !grs_have_data(rs))
			rev |= POLLHUP; /* as TCP: what arrived before the hangup is read first */
		else if (rs->state == GRS_FAILED)
			rev |= POLLERR;
		pthread_mutex_unlock(&rs->cq_lock);
		return rev;
	}
	switch (rs->state) {
	case GRS_LISTENING:
		p.fd = rs->ch->fd;
		p.events = POLLIN;
		p.revents = 0;
		if (poll(&p, 1, 0) > 0 && (p.revents & POLLIN))
			rev = events & POLLIN;
		return rev;
	case GRS_CONNECT_ERROR:
		return (short)((events & (POLLIN | POLLOUT)) | POLLERR);
	case GRS_IDLE:
	case GRS_BOUND:
		return (short)((events & POLLOUT) | POLLHUP); /* as an unconnected TCP socket */
	default:
		return 0;
	}
}

/* Everything at once, without sleeping. */
static int grs_poll_now(struct pollfd *fds, nfds_t nfds, int arm)
{
	int n = 0;

	for (nfds_t i = 0; i < nfds; i++) {
		struct grs *rs = fds[i].fd >= 0 ? grs_get(fds[i].fd) : NULL;

		fds[i].revents = 0;
		if (rs)
			fds[i].revents = grs_revents(rs, fds[i].events, arm);
		else if (fds[i].fd >= 0 && !arm)
			(void)poll(&fds[i], 1, 0);
		if (fds[i].revents)
			n++;
	}
	return n;
}

int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)
{
	uint64_t start_us = grs_now_us(), start_ms = grs_now_ms();
	struct pollfd *kfds;
	int n, saved = errno;

	if (nfds && !fds) {
		errno = EFAULT;
		return -1;
	}
	do {
		n = grs_poll_now(fds, nfds, 0);
		if (n || !timeout)
			return n;
	} while (grs_now_us() - start_us <= GRS_SPIN_USEC);

	kfds = calloc(nfds ? nfds : 1, sizeof(*kfds));
	if (!kfds) {
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		int wait = -1, nudge_wait = -1, nudge;

		n = grs_poll_now(fds, nfds, 1);
		if (n)
			break;
		for (nfds_t i = 0; i < nfds; i++) {
			struct grs *rs = fds[i].fd >= 0 ? grs_get(fds[i].fd) : NULL;

			kfds[i].revents = 0;
			if (!rs) {
				kfds[i].fd = fds[i].fd;
				kfds[i].events = fds[i].events;
				continue;
			}
			kfds[i].fd = grs_has_cq(rs) ? rs->cch->fd : rs->ch->fd;
			kfds[i].events = POLLIN;
			nudge = grs_nudge_in(rs);
			if (nudge >= 0 && (nudge_wait < 0 || nudge < nudge_wait))
				nudge_wait = nudge + 1;
		}
		if (timeout >= 0) {
			uint64_t gone = grs_now_ms() - start_ms;

			if (gone >= (uint64_t)timeout) {
				n = 0;
				break;
			}
			wait = (int)((uint64_t)timeout - gone);
		}
		if (nudge_wait >= 0 && (wait < 0 || nudge_wait < wait))
			wait = nudge_wait; /* wake to send it (grs_revents) */
		n = poll(kfds, nfds, wait);
		if (n < 0 || (n == 0 && nudge_wait < 0))
			break;
		if (n == 0)
			continue;
		n = 0;
		for (nfds_t i = 0; i < nfds; i++) {
			struct grs *rs;

			fds[i].revents = 0;
			if (!kfds[i].revents)
				continue;
			rs = fds[i].fd >= 0 ? grs_get(fds[i].fd) : NULL;
			if (!rs) {
				fds[i].revents = kfds[i].revents;
			} else {
				if (grs_has_cq(rs) && kfds[i].fd == rs->cch->fd) {
					pthread_mutex_lock(&rs->cq_wait);
					(void)grs_cq_event(rs);
					pthread_mutex_unlock(&rs->cq_wait);
				}
				fds[i].revents = grs_revents(rs, fds[i].events, 0);
			}
			if (fds[i].revents)
				n++;
		}
		if (n)
			break;
	}
	free(kfds);
	if (n >= 0)
		errno = saved;
	return n;
}

int rselect(int nfds, fd_set *readfds, fd_set *writefds, fd_set *exceptfds, struct timeval *timeout)
{
	struct pollfd *fds;
	int n = 0, ret, ms = -1;

	if (nfds < 0 || nfds > FD_SETSIZE) {
		errno = EINVAL;
		return -1;
	}
	fds = calloc(nfds ? (size_t)nfds : 1, sizeof(*fds));
	if (!fds) {
		errno = ENOMEM;
		return -1;
	}
	for (int fd = 0; fd < nfds; fd++) {
		short ev = 0;
		int want = 0;

		if (readfds && FD_ISSET(fd, readfds)) {
			ev |= POLLIN;
			want = 1;
		}
		if (writefds && FD_ISSET(fd, writefds)) {
			ev |= POLLOUT;
			want = 1;
		}
		if (exceptfds && FD_ISSET(fd, exceptfds))
			want = 1;
		if (want) {
			fds[n].fd = fd;
			fds[n].events = ev;
			n++;
		}
	}
	if (timeout)
		ms = (int)(timeout->tv_sec * 1000 + (timeout->tv_usec + 999) / 1000);
	ret = rpoll(fds, (nfds_t)n, ms);
	if (ret < 0) {
		free(fds);
		return -1;
	}
	if (readfds)
		FD_ZERO(readfds);
	if (writefds)
		FD_ZERO(writefds);
	if (exceptfds)
		FD_ZERO(exceptfds);
	ret = 0;
	for (int i = 0; i < n; i++) {
		short r = fds[i].revents;

		if (readfds && (r & (POLLIN | POLLHUP | POLLERR)) && (fds[i].events & POLLIN)) {
			FD_SET(fds[i].fd, readfds);
			ret++;
		}
		if (writefds && (r & (POLLOUT | POLLERR)) && (fds[i].events & POLLOUT)) {
			FD_SET(fds[i].fd, writefds);
			ret++;
		}
		if (exceptfds && (r & POLLPRI)) {
			FD_SET(fds[i].fd, exceptfds);
			ret++;
		}
	}
	free(fds);
	return ret;
}
