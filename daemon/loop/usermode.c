/* SPDX-License-Identifier: MIT */
/*
 * User mode (user_mode = 1): a daemon that a trainer's first process on a
 * node started for its own user, from the wheel (client/python/stoker/
 * _userd.py starts it; docs/slurm.md). Three rules set it apart from the
 * system service:
 *   - its socket's directory is its own and 0700, and nothing it creates
 *     is group- or world-writable (umask 077, socket mode 0600);
 *   - it serves only its own uid (SO_PEERCRED; server.c asks here);
 *   - it exits after idle_exit_s with no connection, so a job leaves
 *     nothing running. Starters hold `lock` beside the socket while they
 *     connect or start a daemon; the daemon takes the same lock before it
 *     stops, so a client is never left connecting to a daemon on its way
 *     out: either it got in first, or it finds no socket and starts a new one.
 * Loop thread only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"

/* The directory part of the socket's path ("." for a bare name). */
static void socket_dir(const struct daemon *d, char *out, size_t size)
{
	const char *slash = strrchr(d->cfg.socket_path, '/');

	if (!slash)
		snprintf(out, size, ".");
	else if (slash == d->cfg.socket_path)
		snprintf(out, size, "/");
	else
		snprintf(out, size, "%.*s", (int)(slash - d->cfg.socket_path), d->cfg.socket_path);
}

int usermode_prepare(struct daemon *d)
{
	char dir[sizeof(d->cfg.socket_path)];
	const char *why;
	struct stat st;

	if (!d->cfg.user_mode)
		return 0;
	umask(077);
	d->cfg.socket_mode &= 0700;
	socket_dir(d, dir, sizeof(dir));
	if (lstat(dir, &st) < 0) {
		log_error("user mode: socket directory %s: %s", dir, strerror(errno));
		return -errno;
	}
	why = !S_ISDIR(st.st_mode)     ? "not a directory"
	      : st.st_uid != geteuid() ? "owned by another user"
	      : (st.st_mode & 077)     ? "group or others have access"
				       : NULL;
	if (why) {
		log_error("user mode: refusing socket directory %s: %s (owner uid %d, mode %04o); it must be a "
			  "directory of uid %d with mode 0700",
			  dir, why, (int)st.st_uid, (unsigned)(st.st_mode & 07777), (int)geteuid());
		return -EPERM;
	}
	log_info("user mode: serving uid %d only; exiting after %u s with no client (idle_exit_s)", (int)geteuid(),
		 d->cfg.idle_exit_s);
	return 0;
}

bool usermode_admits(const struct daemon *d, uid_t uid)
{
	return !d->cfg.user_mode || uid == geteuid();
}

/* The starters' lock, taken without waiting: -EWOULDBLOCK while a client
 * is connecting or starting a daemon. The descriptor on success. */
static int lock_starters(const struct daemon *d)
{
	char dir[sizeof(d->cfg.socket_path)], path[PATH_MAX];
	int fd;

	socket_dir(d, dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/lock", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	return fd;
}

void usermode_tick(struct daemon *d)
{
	uint64_t now = monotonic_ns();
	char why[96];
	int fd;

	if (!d->cfg.user_mode || d->stopping || d->draining)
		return;
	if (d->nconns || !d->cfg.idle_exit_s) {
		d->idle_since_ns = 0;
		return;
	}
	if (!d->idle_since_ns)
		d->idle_since_ns = now;
	if (now - d->idle_since_ns < (uint64_t)d->cfg.idle_exit_s * 1000000000ull)
		return;
	fd = lock_starters(d);
	if (fd == -EWOULDBLOCK)
		return; /* a client is on its way in: look again next second */
	if (fd < 0)
		log_warning("user mode: lock beside %s: %s; stopping anyway", d->cfg.socket_path, strerror(-fd));
	snprintf(why, sizeof(why), "idle: no client for %u s (idle_exit_s)", d->cfg.idle_exit_s);
	/* Under the lock: the socket is gone before any starter looks again. */
	service_stop(d, why);
	if (fd >= 0)
		close(fd);
}
