/* goiwarp's threads block every asynchronous signal, so a process-directed
 * signal (kill(getpid(), SIGUSR2), SIGCHLD, SIGIO, an interval timer's SIGALRM)
 * always goes to one of the application's threads, as it would without us.
 *
 * The Go runtime gives each thread it starts the signal mask of the thread that
 * started the runtime, less the signals it insists on receiving. The loader shim
 * starts the core on a thread that blocks everything (capi/loader/shim.c), so
 * what stays open is the runtime's "always unblock" list. That list holds the
 * synchronous signals a Go panic needs (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP)
 * and glibc's internal thread signals (32-34, sent to one thread by libc itself),
 * but also three asynchronous ones: SIGCHLD, SIGPROF and SIGSTKFLT. A SIGCHLD
 * that lands on a runtime thread whose disposition is the default is discarded
 * there, and a main thread waiting for it in sigwaitinfo or a signalfd never
 * sees it.
 *
 * So before the runtime starts (this constructor runs ahead of the Go library's
 * own, which has no priority) those three lose their "always unblock" flag in the
 * runtime's signal table. The table is not a dynamic symbol, so it is found by
 * its contents: an array of { int32 flags; string name; } whose entry for
 * SIGCHLD names "SIGCHLD: child status has changed", in this library's writable
 * segment (flag bit 7 = unblock). The three entries and SIGSEGV's are checked by
 * name before anything is changed; if the table is not found (another Go
 * release), nothing is, the signals stay open as before and the signals_directed
 * test fails. SIGPROF stays open under GOIWARP_CPUPROFILE: Go's profiler
 * samples each thread with it. SIGURG (Go's preemption signal) is blockable
 * too: the core is built with asyncpreemptoff=1. */
#define _GNU_SOURCE
#include <link.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct go_string {
	const char *p;
	long n;
};

struct go_sigtab {
	int flags;
	struct go_string name;
};

#define GO_SIG_UNBLOCK (1 << 7)
#define GO_NSIG 65

static const struct {
	int sig;
	const char *name;
} async_unblocked[] = {
	{ SIGSTKFLT, "SIGSTKFLT: stack fault" },
	{ SIGCHLD, "SIGCHLD: child status has changed" },
	{ SIGPROF, "SIGPROF: profiling alarm clock" },
};

static const char chld_name[] = "SIGCHLD: child status has changed";

struct segments {
	const void *self; /* an address inside this library */
	struct { char *p; size_t n; int writable; } seg[16];
	int nseg;
};

static int find_self(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct segments *s = arg;
	int mine = 0;

	(void)size;
	s->nseg = 0;
	for (int i = 0; i < info->dlpi_phnum && s->nseg < 16; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		char *p = (char *)(info->dlpi_addr + ph->p_vaddr);

		if (ph->p_type != PT_LOAD)
			continue;
		if ((const char *)s->self >= p && (const char *)s->self < p + ph->p_memsz)
			mine = 1;
		s->seg[s->nseg].p = p;
		s->seg[s->nseg].n = ph->p_filesz;
		s->seg[s->nseg].writable = (ph->p_flags & PF_W) != 0;
		s->nseg++;
	}
	return mine; /* non-zero stops the walk */
}

/* The scans below read the core's data segments whole, the C globals'
 * guard zones included under AddressSanitizer: they are not instrumented and
 * call no intercepted function (memmem, memcmp) over that memory. */
#define UNCHECKED __attribute__((no_sanitize_address))

UNCHECKED static int bytes_equal(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] != b[i])
			return 0;
	return 1;
}

UNCHECKED static int entry_is(const struct go_sigtab *t, int sig, const char *name)
{
	size_t n = strlen(name);

	return t[sig].name.n == (long)n && bytes_equal(t[sig].name.p, name, n);
}

/* The runtime's table whose SIGCHLD entry names the string at str, or NULL. */
UNCHECKED static struct go_sigtab *table_naming(const struct segments *s, const char *str)
{
	for (int i = 0; i < s->nseg; i++) {
		if (!s->seg[i].writable)
			continue;
		const char *p = s->seg[i].p, *end = p + s->seg[i].n;
		for (p += (8 - (uintptr_t)p % 8) % 8; p + sizeof(struct go_sigtab) <= end; p += 8) {
			const struct go_sigtab *e = (const void *)(p - offsetof(struct go_sigtab, name));
			if (e->name.p != str || e->name.n != (long)sizeof chld_name - 1)
				continue;
			struct go_sigtab *t = (struct go_sigtab *)e - SIGCHLD;
			if ((char *)t >= s->seg[i].p && (char *)(t + GO_NSIG) <= end &&
			    entry_is(t, SIGSEGV, "SIGSEGV: segmentation violation"))
				return t;
		}
	}
	return NULL;
}

UNCHECKED static struct go_sigtab *find_sigtable(void)
{
	struct segments s = { .self = (const void *)&find_sigtable };

	if (!dl_iterate_phdr(find_self, &s))
		return NULL;
	for (int i = 0; i < s.nseg; i++) {
		const char *p = s.seg[i].p, *end = p + s.seg[i].n;
		for (; p + sizeof chld_name - 1 <= end; p++) {
			if (!bytes_equal(p, chld_name, sizeof chld_name - 1))
				continue;
			struct go_sigtab *t = table_naming(&s, p);
			if (t)
				return t;
		}
	}
	return NULL;
}

UNCHECKED __attribute__((constructor(101))) static void gcapi_block_async_signals(void)
{
	size_t n = sizeof async_unblocked / sizeof async_unblocked[0];
	struct go_sigtab *t = find_sigtable();

	if (!t)
		return;
	for (size_t i = 0; i < n; i++)
		if (!entry_is(t, async_unblocked[i].sig, async_unblocked[i].name) ||
		    !(t[async_unblocked[i].sig].flags & GO_SIG_UNBLOCK))
			return;
	for (size_t i = 0; i < n; i++)
		if (async_unblocked[i].sig != SIGPROF || !getenv("GOIWARP_CPUPROFILE"))
			t[async_unblocked[i].sig].flags &= ~GO_SIG_UNBLOCK;
}
