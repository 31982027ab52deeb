/*
 * Every signal handler the application installs runs on the alternate signal
 * stack (SA_ONSTACK).
 *
 * Why: goiwarp's Go code also runs on the application's own threads (the send
 * doorbell of an idle queue, the progress call of a poll that found its CQ
 * empty), on a small goroutine stack. A handler installed without SA_ONSTACK
 * that interrupts such a thread runs on that goroutine stack, below its end, and
 * overwrites whatever lies there: the process dies later with "unknown caller
 * pc" or "unexpected fault address" (perftest's -D SIGALRM handler, installed
 * with signal()). Go's runtime adds SA_ONSTACK to the handlers that exist when it
 * starts; these interposers add it to every handler installed at any time
 * through libc's entry points. While a thread runs Go code the runtime has given
 * it an alternate stack; on a thread without one SA_ONSTACK changes nothing.
 *
 * Each entry point keeps libc's semantics (flags, mask, return value) and only
 * forwards to libc's sigaction with SA_ONSTACK added. Not covered: a handler
 * installed with a raw rt_sigaction system call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

static sigaction_fn libc_sigaction(void)
{
	static sigaction_fn fn;
	sigaction_fn f = __atomic_load_n(&fn, __ATOMIC_ACQUIRE);

	if (!f) {
		f = (sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
		__atomic_store_n(&fn, f, __ATOMIC_RELEASE);
	}
	return f;
}

static int forward(int sig, const struct sigaction *act, struct sigaction *old)
{
	sigaction_fn f = libc_sigaction();

	if (!f) {
		errno = ENOSYS;
		return -1;
	}
	if (act && !(act->sa_flags & SA_ONSTACK) && act->sa_handler != SIG_DFL &&
	    act->sa_handler != SIG_IGN) {
		struct sigaction a = *act;

		a.sa_flags |= SA_ONSTACK;
		return f(sig, &a, old);
	}
	return f(sig, act, old);
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	return forward(sig, act, old);
}

/* A handler with flags and the signal itself blocked unless SA_NODEFER. */
static sighandler_t install(int sig, sighandler_t h, int flags)
{
	struct sigaction act = { .sa_handler = h, .sa_flags = flags }, old;

	if (h == SIG_ERR || sig <= 0 || sig >= NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	sigemptyset(&act.sa_mask);
	if (!(flags & SA_NODEFER))
		sigaddset(&act.sa_mask, sig);
	if (forward(sig, &act, &old) < 0)
		return SIG_ERR;
	return old.sa_handler;
}

/* glibc's signal() is BSD's: restarting, the signal blocked in its handler. */
EXPORT sighandler_t signal(int sig, sighandler_t h)
{
	return install(sig, h, SA_RESTART);
}

EXPORT sighandler_t bsd_signal(int sig, sighandler_t h)
{
	return install(sig, h, SA_RESTART);
}

/* System V: one-shot, not blocked in its handler (signal() under strict X/Open). */
EXPORT sighandler_t sysv_signal(int sig, sighandler_t h)
{
	return install(sig, h, SA_RESETHAND | SA_NODEFER);
}

EXPORT sighandler_t __sysv_signal(int sig, sighandler_t h)
{
	return install(sig, h, SA_RESETHAND | SA_NODEFER);
}

/* System V sigset(): SIG_HOLD blocks the signal; anything else installs it and
 * unblocks it. Returns SIG_HOLD if the signal was blocked before. */
EXPORT sighandler_t sigset(int sig, sighandler_t h)
{
	sigset_t one, was;
	struct sigaction act = { .sa_handler = h }, old;

	if (h == SIG_ERR || sig <= 0 || sig >= NSIG) {
		errno = EINVAL;
		return SIG_ERR;
	}
	sigemptyset(&one);
	sigaddset(&one, sig);
	if (h == SIG_HOLD) {
		if (forward(sig, NULL, &old) < 0 || sigprocmask(SIG_BLOCK, &one, &was) < 0)
			return SIG_ERR;
		return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
	}
	sigemptyset(&act.sa_mask);
	if (forward(sig, &act, &old) < 0 || sigprocmask(SIG_UNBLOCK, &one, &was) < 0)
		return SIG_ERR;
	return sigismember(&was, sig) ? SIG_HOLD : old.sa_handler;
}
