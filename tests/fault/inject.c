/* SPDX-License-Identifier: MIT */
/*
 * libinject.so: resource failures on demand, for the fault tests. Preloaded
 * (LD_PRELOAD) into a test stokerd or client; every trigger is a count or a
 * size, never a random draw, so a test knows exactly which call fails.
 *
 * A call spec is FIRST[,COUNT]: fail the FIRST-th matching call (1-based)
 * and the COUNT-1 after it (COUNT 1 by default; 0: every one from FIRST on).
 *
 *   STOKER_INJECT_MEMFD=SPEC         memfd_create fails (errno ENOMEM)
 *   STOKER_INJECT_ACCEPT4=SPEC       accept4 of a waiting connection fails (EMFILE)
 *   STOKER_INJECT_PROC_FD_OPEN=SPEC  open("/proc/self/fd/...") fails (EMFILE)
 *   STOKER_INJECT_MALLOC_SIZE=BYTES  malloc/calloc/realloc of exactly BYTES...
 *   STOKER_INJECT_MALLOC=SPEC        ...fail as SPEC says (ENOMEM)
 *   STOKER_INJECT_SENDMSG_MAX=N      sendmsg sends at most N bytes a call
 *   STOKER_INJECT_SENDMSG_EAGAIN=N   every N-th sendmsg fails with EAGAIN
 *   STOKER_INJECT_SENDMSG=SPEC       sendmsg fails (errno ENOBUFS)
 *   STOKER_INJECT_ERRNO_<WHAT>=NAME  another errno for MEMFD, ACCEPT4,
 *                                    PROC_FD_OPEN, SENDMSG (ENOMEM, EMFILE,
 *                                    ENFILE, ENOBUFS, EAGAIN, ENOSPC, EPIPE)
 *   STOKER_INJECT_LOG=PATH           append "what call-number" per failure
 *   STOKER_INJECT_ARMED_BY=PATH      no call counts until PATH exists: a test
 *                                    arms the shim at the moment it chooses,
 *                                    so a spec never depends on calls made
 *                                    before (a readiness probe, say)
 *
 * The malloc family is reached through glibc's __libc_* entry points (no
 * dlsym, which itself allocates). Under AddressSanitizer its allocator
 * wins and the malloc trigger does nothing; the others still work.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

extern void *__libc_malloc(size_t size);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t size);

struct trigger {
	const char *name;
	uint64_t first, count; /* first == 0: never */
	int err;
	_Atomic uint64_t calls;
};

static struct trigger t_memfd = {"memfd_create", 0, 0, ENOMEM, 0};
static struct trigger t_accept4 = {"accept4", 0, 0, EMFILE, 0};
static struct trigger t_proc_open = {"proc_fd_open", 0, 0, EMFILE, 0};
static struct trigger t_malloc = {"malloc", 0, 0, ENOMEM, 0};
static struct trigger t_sendmsg = {"sendmsg", 0, 0, ENOBUFS, 0};
static size_t malloc_size;
static size_t sendmsg_max;
static uint64_t sendmsg_eagain;
static _Atomic uint64_t sendmsg_calls;
static int log_fd = -1;
static const char *armed_by;
static bool ready;

static int errno_by_name(const char *s, int dflt)
{
	static const struct {
		const char *name;
		int value;
	} names[] = {{"ENOMEM", ENOMEM}, {"EMFILE", EMFILE}, {"ENFILE", ENFILE}, {"ENOBUFS", ENOBUFS},
		     {"EAGAIN", EAGAIN}, {"ENOSPC", ENOSPC}, {"EPIPE", EPIPE}};

	for (size_t i = 0; s && i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(s, names[i].name))
			return names[i].value;
	return dflt;
}

static void parse(struct trigger *t, const char *spec_var, const char *errno_var)
{
	const char *spec = getenv(spec_var);
	char *end;

	t->err = errno_by_name(getenv(errno_var), t->err);
	if (!spec || !*spec)
		return;
	t->first = strtoull(spec, &end, 10);
	t->count = *end == ',' ? strtoull(end + 1, NULL, 10) : 1;
}

__attribute__((constructor)) static void inject_init(void)
{
	const char *v;

	parse(&t_memfd, "STOKER_INJECT_MEMFD", "STOKER_INJECT_ERRNO_MEMFD");
	parse(&t_accept4, "STOKER_INJECT_ACCEPT4", "STOKER_INJECT_ERRNO_ACCEPT4");
	parse(&t_proc_open, "STOKER_INJECT_PROC_FD_OPEN", "STOKER_INJECT_ERRNO_PROC_FD_OPEN");
	parse(&t_malloc, "STOKER_INJECT_MALLOC", "STOKER_INJECT_ERRNO_MALLOC");
	parse(&t_sendmsg, "STOKER_INJECT_SENDMSG", "STOKER_INJECT_ERRNO_SENDMSG");
	if ((v = getenv("STOKER_INJECT_MALLOC_SIZE")))
		malloc_size = strtoull(v, NULL, 10);
	if ((v = getenv("STOKER_INJECT_SENDMSG_MAX")))
		sendmsg_max = strtoull(v, NULL, 10);
	if ((v = getenv("STOKER_INJECT_SENDMSG_EAGAIN")))
		sendmsg_eagain = strtoull(v, NULL, 10);
	armed_by = getenv("STOKER_INJECT_ARMED_BY");
	if ((v = getenv("STOKER_INJECT_LOG")))
		log_fd = open(v, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	ready = true;
}

/* Count a matching call; true if it is to fail (errno is set). */
static bool hit(struct trigger *t)
{
	uint64_t n;

	if (!ready || !t->first)
		return false;
	if (armed_by && access(armed_by, F_OK) != 0)
		return false;
	n = atomic_fetch_add(&t->calls, 1) + 1;
	if (n < t->first || (t->count && n >= t->first + t->count))
		return false;
	if (log_fd >= 0) {
		char line[64];
		int len = snprintf(line, sizeof(line), "%s %llu\n", t->name, (unsigned long long)n);

		if (len > 0 && write(log_fd, line, (size_t)len) < 0) {
			/* nothing to do: the log is a convenience */
		}
	}
	errno = t->err;
	return true;
}

static void *next_sym(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

int memfd_create(const char *name, unsigned flags)
{
	static int (*real)(const char *, unsigned);

	if (hit(&t_memfd))
		return -1;
	if (!real)
		real = (int (*)(const char *, unsigned))next_sym("memfd_create");
	return real(name, flags);
}

int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags)
{
	static int (*real)(int, struct sockaddr *, socklen_t *, int);

	/* Only calls that would accept a waiting connection count, so a spec
	 * names connections, however the daemon batches its accepts; the
	 * connection stays in the backlog, as under a real EMFILE. */
	if (t_accept4.first) {
		struct pollfd p = {.fd = fd, .events = POLLIN};

		if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN) && hit(&t_accept4))
			return -1;
	}
	if (!real)
		real = (int (*)(int, struct sockaddr *, socklen_t *, int))next_sym("accept4");
	return real(fd, addr, len, flags);
}

static int open_common(bool is64, const char *path, int flags, mode_t mode)
{
	static int (*real_open)(const char *, int, ...), (*real_open64)(const char *, int, ...);
	int (*real)(const char *, int, ...);

	if (path && !strncmp(path, "/proc/self/fd/", 14) && hit(&t_proc_open))
		return -1;
	if (!real_open) {
		real_open64 = (int (*)(const char *, int, ...))next_sym("open64");
		real_open = (int (*)(const char *, int, ...))next_sym("open");
	}
	real = is64 ? real_open64 : real_open;
	return real(path, flags, mode);
}

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;

		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return open_common(false, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	mode_t mode = 0;

	if (flags & (O_CREAT | O_TMPFILE)) {
		va_list ap;

		va_start(ap, flags);
		mode = (mode_t)va_arg(ap, int);
		va_end(ap);
	}
	return open_common(true, path, flags, mode);
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	static ssize_t (*real)(int, const struct msghdr *, int);
	struct msghdr m;
	struct iovec iov;
	uint64_t n;

	if (!real)
		real = (ssize_t(*)(int, const struct msghdr *, int))next_sym("sendmsg");
	if (hit(&t_sendmsg))
		return -1;
	n = atomic_fetch_add(&sendmsg_calls, 1) + 1;
	if (ready && sendmsg_eagain && n % sendmsg_eagain == 0) {
		errno = EAGAIN;
		return -1;
	}
	if (!ready || !sendmsg_max || msg->msg_iovlen == 0 || msg->msg_iov[0].iov_len <= sendmsg_max)
		return real(fd, msg, flags);
	/* A short write: the first sendmsg_max bytes (and any fds with them). */
	m = *msg;
	iov = msg->msg_iov[0];
	iov.iov_len = sendmsg_max;
	m.msg_iov = &iov;
	m.msg_iovlen = 1;
	return real(fd, &m, flags);
}

void *malloc(size_t size)
{
	if (malloc_size && size == malloc_size && hit(&t_malloc))
		return NULL;
	return __libc_malloc(size);
}

void *calloc(size_t n, size_t size)
{
	if (malloc_size && size && n <= SIZE_MAX / size && n * size == malloc_size && hit(&t_malloc))
		return NULL;
	return __libc_calloc(n, size);
}

void *realloc(void *p, size_t size)
{
	if (malloc_size && size == malloc_size && hit(&t_malloc))
		return NULL;
	return __libc_realloc(p, size);
}
