/* SPDX-License-Identifier: MIT */
/*
 * A client's right to read a data set's files, decided by the kernel.
 *
 * stokerd reads every data set with its own credentials (it serves many
 * users from one cache), so it must not read for a client what that client
 * could not read itself. At attach, a short-lived thread takes the client's
 * file-system identity (per-thread setfsuid/setfsgid/setgroups through raw
 * system calls: glibc's wrappers would change every thread) and drops its
 * effective capabilities, then opens the data set's root and each sample
 * file once: the kernel checks the mode bits, the POSIX ACLs and every
 * directory on the path, symlinks followed. What it could open is the
 * session's readable map; workers consult it before the cache or the file,
 * so a cache hit never skips the check. Once per file per attach; nothing
 * per sample afterwards but a bit test.
 *
 * A root client gets root's view: the daemon's own (a non-root daemon never
 * grants more than it has). Groups are the kernel's record of the peer at
 * connect (SO_PEERGROUPS), so a group added since the daemon started counts
 * from the client's next process on. docs/deploy.md, "Multi-user nodes".
 */
#ifndef STOKER_ACCESS_H
#define STOKER_ACCESS_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct dataset;

/* Who a client is, for the file system. */
struct access_id {
	uid_t uid;
	gid_t gid;
	uint32_t ngroups;
	gid_t *groups; /* supplementary groups, malloc'd */
};

/* The peer of socket `fd` (uid and gid from SO_PEERCRED, the caller's),
 * its supplementary groups read with SO_PEERGROUPS. 0 or -errno. */
int access_id_from_socket(int fd, uid_t uid, gid_t gid, struct access_id *out);
/* Accepts a zeroed id. */
void access_id_clear(struct access_id *id);

/* Does the client read with the daemon's own view (root)? Then no map. */
static inline bool access_id_is_root(const struct access_id *id)
{
	return id->uid == 0;
}

/*
 * Run fn(arg) on a new thread holding id's file-system identity and no
 * effective capability, and wait for it. fn's result, or -ENOTSUP when the
 * daemon cannot take the identity (it lacks CAP_SETUID/CAP_SETGID), or
 * -errno from the thread's creation. For a root id, fn runs with the
 * daemon's own credentials.
 */
int access_run(const struct access_id *id, int (*fn)(void *arg), void *arg);

/*
 * The data set's real path (dataset_realpath) resolved as the client, and
 * its root opened for reading as the client (a directory or list file; for
 * a shard pattern its directory is searched, each shard checked by the map).
 * -EACCES when the client may not; errbuf then names the path and the uid.
 */
int access_realpath(const struct access_id *id, const char *path, char real[PATH_MAX], char *errbuf, size_t errlen);

/* Which of a data set's samples a client may read. */
#define ACCESS_MAP_LOGGED 8u
struct access_map {
	uint64_t count;                     /* samples */
	uint64_t unreadable;                /* bits clear */
	uint64_t logged[ACCESS_MAP_LOGGED]; /* the first unreadable ones, for the log */
	uint64_t bits[];                    /* [count / 64 + 1], 1: readable */
};

/*
 * Open every sample file of local data set `ds` once as `id` (a tar
 * shard's samples: the shard; a detection sample: its image and its label
 * file). Files the kernel refuses (EACCES, EPERM)
 * are unreadable; one missing now is left to the read to find, as today.
 * -EACCES (errbuf names the data set and uid) when no sample is readable,
 * -ESTALE when the root is not the one scanned, -ENOMEM, -errno.
 */
int access_map_build(const struct access_id *id, const struct dataset *ds, struct access_map **out, char *errbuf,
		     size_t errlen);

static inline bool access_readable(const struct access_map *m, uint64_t index)
{
	return !m || ((m->bits[index / 64] >> (index % 64)) & 1);
}

/* The first readable index at or after `index`, wrapping (m has one). */
uint64_t access_next_readable(const struct access_map *m, uint64_t index);

/* Samples of order[0..n) the client may not read. */
uint64_t access_count_unreadable(const struct access_map *m, const uint64_t *order, uint64_t n);

/* Do two clients read the same samples (both unrestricted, or equal maps)? */
bool access_map_equal(const struct access_map *a, const struct access_map *b);

#endif
