/* SPDX-License-Identifier: MIT */
/* A client's right to read a data set's files (access.h). */
#include "access.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "dataset.h"
#include "labels.h"
#include "errtext.h"
#include "shards.h"

/* A sample file is opened, never read: no FIFO can block it, no terminal
 * becomes the daemon's. */
#define ACCESS_OPEN_FLAGS (O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)
/* Supplementary groups a peer may bring (the kernel's NGROUPS_MAX). */
#define ACCESS_MAX_GROUPS 65536u

int access_id_from_socket(int fd, uid_t uid, gid_t gid, struct access_id *out)
{
	gid_t *groups = NULL;
	socklen_t len = 64 * sizeof(gid_t);
	int r;

	for (;;) {
		gid_t *g = realloc(groups, len ? len : sizeof(gid_t));

		if (!g) {
			r = -ENOMEM;
			goto fail;
		}
		groups = g;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0)
			break;
		/* ERANGE: the kernel said how much room the list needs. */
		if (errno != ERANGE || len == 0 || len > ACCESS_MAX_GROUPS * sizeof(gid_t)) {
			r = -errno;
			goto fail;
		}
	}
	*out = (struct access_id){.uid = uid, .gid = gid, .ngroups = (uint32_t)(len / sizeof(gid_t)), .groups = groups};
	return 0;
fail:
	free(groups);
	return r;
}

void access_id_clear(struct access_id *id)
{
	free(id->groups);
	id->groups = NULL;
	id->ngroups = 0;
}

/* This thread's effective capabilities, all dropped (the permitted set is
 * left: the thread ends soon). capset with pid 0 is per thread. */
static int drop_effective_caps(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, data) < 0)
		return -errno;
	for (unsigned i = 0; i < _LINUX_CAPABILITY_U32S_3; i++)
		data[i].effective = 0;
	if (syscall(SYS_capset, &h, data) < 0)
		return -errno;
	return 0;
}

/* Take id's file-system identity on this thread only: raw system calls,
 * since glibc's setgroups() changes every thread of the process. */
static int become(const struct access_id *id)
{
	bool own_groups = false;

	if (access_id_is_root(id))
		return 0;
	if (syscall(SYS_setgroups, (size_t)id->ngroups, id->groups) < 0) {
		/* Without CAP_SETGID (a daemon a user started for itself): its
		 * own user keeps the daemon's groups; anyone else is refused. */
		if (errno != EPERM || id->uid != geteuid())
			return -errno;
		own_groups = true;
	}
	/* setfs[ug]id report the previous value, never an error: ask again. */
	if (!own_groups) {
		syscall(SYS_setfsgid, id->gid);
		if ((gid_t)syscall(SYS_setfsgid, (gid_t)-1) != id->gid)
			return -EPERM;
	}
	syscall(SYS_setfsuid, id->uid);
	if ((uid_t)syscall(SYS_setfsuid, (uid_t)-1) != id->uid)
		return -EPERM;
	/* From fsuid 0 the kernel drops the file capabilities itself; a daemon
	 * with ambient CAP_DAC_READ_SEARCH (not root) must drop them here. */
	return drop_effective_caps();
}

struct access_call {
	const struct access_id *id;
	int (*fn)(void *);
	void *arg;
	int r;
};

static void *access_thread(void *p)
{
	struct access_call *c = p;

	c->r = become(c->id);
	if (c->r < 0)
		c->r = -ENOTSUP; /* not the client's fault: the daemon cannot check */
	else
		c->r = c->fn(c->arg);
	return NULL;
}

int access_run(const struct access_id *id, int (*fn)(void *arg), void *arg)
{
	struct access_call c = {.id = id, .fn = fn, .arg = arg, .r = 0};
	sigset_t all, old;
	pthread_t t;
	int r;

	/* The thread takes no signal: they are the loop's. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	r = pthread_create(&t, NULL, access_thread, &c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (r != 0)
		return -r;
	pthread_join(t, NULL);
	return c.r;
}

struct root_call {
	const char *path;
	char *real;
};

static int root_open(void *arg)
{
	struct root_call *c = arg;
	char dir[PATH_MAX];
	const char *open_path = c->real;
	char *slash;
	int fd, r;

	r = dataset_realpath(c->path, c->real);
	if (r < 0)
		return r;
	if (shards_spec(c->real)) {
		/* The pattern's directory; each shard is checked by the map. */
		snprintf(dir, sizeof(dir), "%s", c->real);
		slash = strrchr(dir, '/');
		if (slash && slash != dir)
			*slash = '\0';
		open_path = dir;
	}
	fd = open(open_path, ACCESS_OPEN_FLAGS);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

int access_realpath(const struct access_id *id, const char *path, char real[PATH_MAX], char *errbuf, size_t errlen)
{
	char tmp[PATH_MAX];
	struct root_call c = {.path = path, .real = tmp};
	int r = access_run(id, root_open, &c);

	if (r == -EACCES || r == -EPERM) {
		set_err(errbuf, errlen,
			"data set %s: permission denied to uid %u (the client's own permissions decide)", path,
			(unsigned)id->uid);
		return -EACCES;
	}
	if (r == -ENOTSUP) {
		set_err(errbuf, errlen,
			"data set %s: stokerd cannot check what uid %u may read (it lacks CAP_SETUID and "
			"CAP_SETGID), so it serves no other user's attach",
			path, (unsigned)id->uid);
		return -EACCES;
	}
	if (r < 0) {
		set_err(errbuf, errlen, "data set %s: %s", path, strerror(-r));
		return r;
	}
	memcpy(real, tmp, PATH_MAX);
	return 0;
}

struct map_call {
	const struct dataset *ds;
	const char *dir; /* where ds's names are relative to, as a path */
	struct access_map *m;
	uint8_t *shard_ok; /* [shards]: 0 unknown, 1 readable, 2 not */
};

/* Can the client open `path` (relative to dirfd)? 1, 0, or -errno for a
 * failure that is nobody's permission (the daemon's descriptors, memory). */
static int can_open(int dirfd, const char *path)
{
	int fd = openat(dirfd, path, ACCESS_OPEN_FLAGS);

	if (fd >= 0) {
		close(fd);
		return 1;
	}
	if (errno == EACCES || errno == EPERM)
		return 0;
	if (errno == EMFILE || errno == ENFILE || errno == ENOMEM)
		return -errno;
	return 1; /* gone or broken since the scan: the read finds it, as today */
}

/* can_open for the label file of image `name` (relative to `dir`, or
 * absolute), where Ultralytics looks for it (labels_path). A path too long
 * to name has no label file the daemon reads either. */
static int can_open_label(const char *dir, const char *name)
{
	char image[PATH_MAX * 2], label[PATH_MAX * 2];

	if ((size_t)snprintf(image, sizeof(image), "%s%s%s", name[0] == '/' ? "" : dir, name[0] == '/' ? "" : "/",
			     name) >= sizeof(image) ||
	    labels_path(image, label, sizeof(label)) < 0)
		return 1;
	return can_open(AT_FDCWD, label);
}

static int map_fill(void *arg)
{
	struct map_call *c = arg;
	const struct dataset *ds = c->ds;
	struct access_map *m = c->m;
	struct stat want, got;
	int dirfd = -1, r = 0;

	if (!ds->shards) {
		/* The kernel walks the path from '/' as the client. */
		dirfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dirfd < 0) {
			r = -errno;
			goto out;
		}
		if (fstat(dirfd, &got) < 0 || fstat(ds->dirfd, &want) < 0 || got.st_dev != want.st_dev ||
		    got.st_ino != want.st_ino) {
			r = -ESTALE;
			goto out;
		}
	}
	for (uint64_t i = 0; i < ds->count; i++) {
		int ok;

		if (ds->shards) {
			uint32_t k = ds->shards->sample_shard[i];

			if (!c->shard_ok[k]) {
				ok = can_open(AT_FDCWD, ds->shards->v[k].loc);
				if (ok < 0) {
					r = ok;
					goto out;
				}
				c->shard_ok[k] = ok ? 1 : 2;
			}
			ok = c->shard_ok[k] == 1;
		} else {
			ok = can_open(dirfd, dataset_name(ds, i));
			/* A detection sample is its image and its label file
			 * (boxes, polygons, keypoints): both, or neither. */
			if (ok > 0 && ds->box_off)
				ok = can_open_label(c->dir, dataset_name(ds, i));
			if (ok < 0) {
				r = ok;
				goto out;
			}
		}
		if (ok) {
			m->bits[i / 64] |= 1ull << (i % 64);
		} else {
			if (m->unreadable < ACCESS_MAP_LOGGED)
				m->logged[m->unreadable] = i;
			m->unreadable++;
		}
	}
out:
	if (dirfd >= 0)
		close(dirfd);
	return r;
}

int access_map_build(const struct access_id *id, const struct dataset *ds, struct access_map **out, char *errbuf,
		     size_t errlen)
{
	struct map_call c = {.ds = ds};
	char link[64], dir[PATH_MAX];
	ssize_t n;
	int r;

	if (ds->remote) {
		set_err(errbuf, errlen, "data set %s: not local files", ds->root);
		return -EINVAL;
	}
	if (!ds->shards) {
		/* The directory the names are relative to, by the path the
		 * client's kernel walk takes (checked to be the same one). */
		snprintf(link, sizeof(link), "/proc/self/fd/%d", ds->dirfd);
		n = readlink(link, dir, sizeof(dir) - 1);
		if (n < 0 || ds->dirfd < 0) {
			r = n < 0 ? -errno : -EBADF;
			set_err(errbuf, errlen, "data set %s: cannot name its directory: %s", ds->root, strerror(-r));
			return r;
		}
		dir[n] = '\0';
		c.dir = dir;
	} else {
		c.shard_ok = calloc(ds->shards->n ? ds->shards->n : 1, 1);
		if (!c.shard_ok)
			goto nomem;
	}
	c.m = calloc(1, sizeof(*c.m) + (ds->count / 64 + 1) * sizeof(uint64_t));
	if (!c.m)
		goto nomem;
	c.m->count = ds->count;
	r = access_run(id, map_fill, &c);
	if (r == 0 && ds->count && c.m->unreadable == ds->count)
		r = -EACCES;
	if (r < 0) {
		if (r == -EACCES)
			set_err(errbuf, errlen,
				"data set %s: permission denied to uid %u: none of its %llu files is "
				"readable by it",
				ds->root, (unsigned)id->uid, (unsigned long long)ds->count);
		else if (r == -ESTALE)
			set_err(errbuf, errlen, "data set %s: its directory changed while attaching; attach again",
				ds->root);
		else
			set_err(errbuf, errlen, "data set %s: cannot check uid %u's access: %s", ds->root,
				(unsigned)id->uid, strerror(-r));
		free(c.m);
		free(c.shard_ok);
		return r;
	}
	free(c.shard_ok);
	*out = c.m;
	return 0;
nomem:
	free(c.shard_ok);
	set_err(errbuf, errlen, "data set %s: out of memory for its access map", ds->root);
	return -ENOMEM;
}

uint64_t access_next_readable(const struct access_map *m, uint64_t index)
{
	uint64_t n = m->count;

	/* Bit by bit to the next word, then word by word (wrapping once). */
	for (uint64_t step = 0; step < n;) {
		uint64_t i = (index + step) % n, w = m->bits[i / 64] >> (i % 64);

		if (w & 1)
			return i;
		if (w == 0) /* nothing left in this word (nor past the end) */
			step += 64 - i % 64 < n - i ? 64 - i % 64 : n - i;
		else
			step += (uint64_t)__builtin_ctzll(w);
	}
	return index; /* none: the caller's replacement rule takes over */
}

uint64_t access_count_unreadable(const struct access_map *m, const uint64_t *order, uint64_t n)
{
	uint64_t k = 0;

	if (!m || !m->unreadable)
		return 0;
	for (uint64_t i = 0; i < n; i++)
		k += !access_readable(m, order[i]);
	return k;
}

bool access_map_equal(const struct access_map *a, const struct access_map *b)
{
	if (!a || !b)
		return a == b || (a ? a : b)->unreadable == 0;
	return a->count == b->count && a->unreadable == b->unreadable &&
	       !memcmp(a->bits, b->bits, (a->count / 64 + 1) * sizeof(uint64_t));
}
