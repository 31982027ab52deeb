/*
 * libgoiwarp.so.1 -- the loader shim in front of the Go core (libgoiwarp-core.so.1).
 *
 * Why: a Go -buildmode=c-shared library starts the Go runtime (threads, sysmon,
 * Ps) in a constructor at load time. fork() without exec keeps only the forking
 * thread, so in the child the Go runtime is dead and every call into Go hangs.
 * qperf's server forks a child per client before any RDMA call, and the child
 * does all the RDMA work; so does any program that loads us and forks first.
 *
 * So the library programs load (-lgoiwarp, LD_PRELOAD) is this small C shim. It
 * starts nothing: it exports exactly the core's public function names (the list
 * is generated at build time from `nm -D` of the core, filtered by the version
 * script's patterns: capi/loader/gen-symbols.sh), each one an assembly
 * trampoline (trampolines.S) that loads its slot of goiwarp_loader_table and
 * tail-jumps to it. While the slot is empty the trampoline saves every argument
 * register, calls goiwarp_loader_resolve() below, restores them and jumps to
 * what it returned; the arguments, the stack and the return address are the
 * caller's, untouched, so any signature (varargs, stack arguments, struct
 * returns) is forwarded. The resolver, once per process, dlopen()s the core --
 * first from the shim's own directory, else by soname on the normal search
 * path -- RTLD_NOW|RTLD_LOCAL, and fills the whole table with dlsym(). A
 * process that forks before its first RDMA call therefore starts a fresh Go
 * runtime in the child (and another one in the parent if it calls too).
 *
 * A process that calls first and then forks has a child whose copy of the core
 * has no Go runtime (fork keeps one thread) but holds the parent's sockets: a
 * call into it could hang, or transmit on the parent's connections. So the
 * shim's pthread_atfork child handler empties the table (the plain-C PASS
 * functions, string tables and the like, stay), and the child's next call
 * loads a core of its own: a second copy of the file (open_core_copy), since
 * dlopen() of a file already loaded returns the dead copy. Its Go runtime
 * installs its signal handlers over the dead one's and forwards to them what
 * is not its own, as it does with any handler it finds. The new copy refuses
 * the parent's objects (capi: gcapi_foreign, EPERM); the ops the child reaches
 * on them without the shim (inline context->ops, ibv_wr_*) land in the dead
 * copy, which checks gcapi_in_forked_child. A child that cannot load a copy
 * (no /proc, memfd_create refused, the file gone or replaced by another
 * build) gets stubs that fail every call the way its kind fails
 * (gen-symbols.sh: NULL, -1 or an errno value, errno EPERM; void calls do
 * nothing) and one line on stderr. Each copy stays mapped for the life of the
 * process (the core is NODELETE, so no later copy lands at its address: capi
 * tells copies apart by address) and takes static TLS, which glibc gives
 * dlopen from a fixed surplus: generations of forks are capped at 64.
 *
 * RTLD_LOCAL: the core's exports never enter the global scope, so the program's
 * and libibverbs'/librdmacm's references (LD_PRELOAD) bind to the shim's names
 * only; the core itself is linked -Bsymbolic by Go, so its internal calls stay
 * inside it. Only functions are forwarded: the API has no data symbols and
 * gen-symbols.sh fails the build if the core ever exports one.
 *
 * If the core cannot be loaded there is no sane return value for an arbitrary
 * function: one line to stderr (dlerror) and abort().
 *
 * Load time does one thing: a constructor records the absolute directory of the
 * shim (dladdr + realpath), so that a relative LD_PRELOAD path still finds the
 * core after the program chdir()s. No threads, no Go.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "goiwarp_symbols.h" /* generated: GOIWARP_NSYMS, GIW_SYM(i, name, kind) lines */

#ifndef GOIWARP_CORE_SONAME
#error "GOIWARP_CORE_SONAME must be defined (CMakeLists.txt)"
#endif

#define HIDDEN __attribute__((visibility("hidden")))

/* Read by the trampolines: slot i is the core's address of name i, or NULL. */
HIDDEN void *goiwarp_loader_table[GOIWARP_NSYMS];
HIDDEN void *goiwarp_loader_resolve(unsigned idx);

static const char *const names[GOIWARP_NSYMS] = {
#define GIW_SYM(i, name, kind) [i] = #name,
#include "goiwarp_symbols.h"
#undef GIW_SYM
};

/* ---- a child that cannot load a core of its own -------------------------- */
static void say_no_core(const char *why)
{
	static int said;
	char msg[PATH_MAX + 200];

	if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		return;
	int n = snprintf(msg, sizeof msg,
			 "libgoiwarp: pid %d, forked after its parent's first RDMA call, cannot load "
			 "a core of its own (%s): RDMA calls fail with EPERM here\n",
			 (int)getpid(), why);
	if (n > 0)
		(void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
}

/* The stubs take no parameters: the SysV ABIs let a caller pass arguments a
 * callee ignores, and every API function returns a scalar or a pointer. */
static void *child_ptr(void)
{
	errno = EPERM;
	return NULL;
}

static long child_neg(void)
{
	errno = EPERM;
	return -1;
}

static long child_errno(void)
{
	errno = EPERM;
	return EPERM;
}

static void child_void(void)
{
}

#define KIND_PASS NULL
#define KIND_PTR (void *)child_ptr
#define KIND_NEG (void *)child_neg
#define KIND_ERRNO (void *)child_errno
#define KIND_VOID (void *)child_void
static void *const child_stub[GOIWARP_NSYMS] = {
#define GIW_SYM(i, name, kind) [i] = KIND_##kind,
#include "goiwarp_symbols.h"
#undef GIW_SYM
};

/* ---- load state ------------------------------------------------------------ */
/* loaded: this process has its core. Guarded by load_lock, which fork() takes
 * (atfork prepare), so a child never inherits a load half done. */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
/* Cores this process image has loaded, its ancestors' included: the copies
 * a forked child inherits are mapped but dead, and a core it loads must be
 * a new copy (below). */
static unsigned generation;
static char core_file[PATH_MAX]; /* the core file the first load found */
static char shim_dir[PATH_MAX]; /* absolute, no trailing '/'; "" if unknown */

static void fork_prepare(void)
{
	pthread_mutex_lock(&load_lock);
}

static void fork_parent(void)
{
	pthread_mutex_unlock(&load_lock);
}

/* The child's one thread: the inherited core has no Go runtime (fork keeps
 * one thread) but copies of the parent's sockets. The next call that needs
 * the core loads one of the child's own; plain-C PASS functions of the old
 * one go on working meanwhile. */
static void fork_child(void)
{
	if (loaded) {
		for (unsigned i = 0; i < GOIWARP_NSYMS; i++)
			if (child_stub[i])
				goiwarp_loader_table[i] = NULL;
		loaded = 0;
	}
	pthread_mutex_unlock(&load_lock);
}

static void shim_dir_of(char *dir, size_t len)
{
	Dl_info info;
	char real[PATH_MAX];

	dir[0] = '\0';
	if (!dladdr((void *)&goiwarp_loader_resolve, &info) || !info.dli_fname ||
	    !strchr(info.dli_fname, '/'))
		return;
	const char *path = realpath(info.dli_fname, real) ? real : info.dli_fname;
	const char *slash = strrchr(path, '/');
	size_t n = (size_t)(slash - path);
	if (n >= len)
		return;
	memcpy(dir, path, n);
	dir[n] = '\0';
	if (n == 0) /* the shim sits in / */
		strcpy(dir, "/.");
}

__attribute__((constructor)) static void shim_init(void)
{
	shim_dir_of(shim_dir, sizeof shim_dir);
	if (pthread_atfork(fork_prepare, fork_parent, fork_child) != 0) {
		fprintf(stderr, "libgoiwarp: pthread_atfork failed\n");
		abort();
	}
}

/* The first core of the process image: the file next to the shim, else by
 * soname. Without it there is no sane return value: abort. */
static void *open_first_core(void)
{
	char path[PATH_MAX + sizeof "/" GOIWARP_CORE_SONAME];
	char first_err[PATH_MAX + 512] = "";
	struct link_map *lm;
	void *h = NULL;

	if (!shim_dir[0]) /* constructor did not run (yet): try now */
		shim_dir_of(shim_dir, sizeof shim_dir);
	if (shim_dir[0]) {
		snprintf(path, sizeof path, "%s/%s", shim_dir, GOIWARP_CORE_SONAME);
		h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			const char *e = dlerror();
			snprintf(first_err, sizeof first_err, "%s", e ? e : path);
		}
	}
	if (!h)
		h = dlopen(GOIWARP_CORE_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		fprintf(stderr, "libgoiwarp: cannot load the Go core %s: %s%s%s\n", GOIWARP_CORE_SONAME,
			e ? e : "unknown dlopen error", first_err[0] ? "; next to the shim: " : "", first_err);
		abort();
	}
	/* where the search found it: a forked child copies that file */
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm->l_name)
		snprintf(core_file, sizeof core_file, "%s", lm->l_name);
	return h;
}

/* A core for a child whose process image already holds one (dead): dlopen()
 * of a file already loaded -- same name, or same device and inode -- returns
 * that copy, so the core file is copied into a memfd and loaded from
 * /proc/self/fd/N, under a name no earlier generation used ("./" once per
 * generation: glibc compares names as strings). NULL and *why on failure. */
static void *open_core_copy(const char **why)
{
	char path[sizeof "/proc/self/fd/" + 2 * 64 + 16];
	struct stat st;
	void *h = NULL;
	int in, fd = -1;

	*why = "no core file recorded";
	if (!core_file[0])
		return NULL;
	if (generation > 64) {
		*why = "too many generations of forks";
		return NULL;
	}
	in = open(core_file, O_RDONLY | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0) {
		*why = strerror(errno);
		goto out;
	}
	fd = memfd_create(GOIWARP_CORE_SONAME, MFD_CLOEXEC);
	if (fd < 0) {
		*why = strerror(errno);
		goto out;
	}
	for (off_t off = 0; off < st.st_size;) {
		ssize_t n = sendfile(fd, in, &off, (size_t)(st.st_size - off));
		if (n <= 0) {
			*why = n < 0 ? strerror(errno) : "core file shrank";
			goto out;
		}
	}
	int len = snprintf(path, sizeof path, "/proc/self/fd/");
	for (unsigned g = 0; g < generation; g++)
		len += snprintf(path + len, sizeof path - len, "./");
	snprintf(path + len, sizeof path - len, "%d", fd);
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		const char *e = dlerror();
		*why = e ? e : "dlopen failed";
	}
out:
	if (fd >= 0)
		close(fd); /* the mapping keeps the copy */
	if (in >= 0)
		close(in);
	return h;
}

static void load_core(void)
{
	const char *why = NULL;
	void *h = generation ? open_core_copy(&why) : open_first_core();
	void *p[GOIWARP_NSYMS];

	for (unsigned i = 0; h && i < GOIWARP_NSYMS; i++) {
		p[i] = dlsym(h, names[i]);
		if (p[i])
			continue;
		if (!generation) {
			fprintf(stderr,
				"libgoiwarp: the Go core %s does not define %s (shim and core from different builds?)\n",
				GOIWARP_CORE_SONAME, names[i]);
			abort();
		}
		why = "the core file is from another build";
		h = NULL;
	}
	if (!h) {
		say_no_core(why);
		for (unsigned i = 0; i < GOIWARP_NSYMS; i++)
			if (child_stub[i])
				__atomic_store_n(&goiwarp_loader_table[i], child_stub[i], __ATOMIC_RELEASE);
		return;
	}
	generation++;
	for (unsigned i = 0; i < GOIWARP_NSYMS; i++)
		/* release: a trampoline that sees the slot (aarch64: ldar) sees the loaded core */
		__atomic_store_n(&goiwarp_loader_table[i], p[i], __ATOMIC_RELEASE);
}

static void *load_core_thread(void *unused)
{
	(void)unused;
	load_core();
	return NULL;
}

/* The first call may come from a thread with a small stack (16 KiB is
 * allowed): dlopen and the core's start need more than that, so the core is
 * loaded on a thread of our own, and inline only if none can be made.
 * Every signal is blocked while it loads: the Go runtime's threads take the
 * mask of the thread that starts it, so none of them will take a signal meant
 * for the application (capi/sigmask.c says which few stay open). */
static void load_core_on_own_stack(void)
{
	pthread_attr_t attr;
	sigset_t all, app;
	pthread_t t;
	int made = 0;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &app);
	if (pthread_attr_init(&attr) == 0) {
		made = pthread_attr_setstacksize(&attr, 1 << 20) == 0 &&
		       pthread_create(&t, &attr, load_core_thread, NULL) == 0;
		pthread_attr_destroy(&attr);
	}
	if (made)
		pthread_join(t, NULL);
	else
		load_core();
	pthread_sigmask(SIG_SETMASK, &app, NULL);
}

void *goiwarp_loader_resolve(unsigned idx)
{
	pthread_mutex_lock(&load_lock);
	if (!loaded) {
		load_core_on_own_stack();
		loaded = 1;
	}
	pthread_mutex_unlock(&load_lock);
	return __atomic_load_n(&goiwarp_loader_table[idx], __ATOMIC_ACQUIRE);
}
