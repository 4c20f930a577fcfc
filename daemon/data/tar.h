/* SPDX-License-Identifier: MIT */
/*
 * The member index of a tar archive: every regular file's name, data offset
 * and size, in archive order, read through a caller's range reader so that
 * the bytes may come from a local file or from range requests.
 *
 * Formats: POSIX ustar (with the 155-byte prefix), GNU (long names 'L',
 * base-256 sizes), pax extended headers ('x': path and size; 'g' skipped).
 * Regular files are types '0', '\0' (not ending in '/') and '7'; links,
 * directories, devices and GNU sparse files are skipped, as Python's
 * tarfile and WebDataset skip them. The archive ends at the first zero
 * block or exactly at the end of the data.
 *
 * The input is hostile: header checksums are checked, every number is
 * parsed with bounds, a member whose data runs past the end, a header cut
 * short, an oversized long name or pax header, a name holding a NUL, and
 * more than max_members members are refused with the offset of the header
 * at fault and why.
 */
#ifndef STOKER_TAR_H
#define STOKER_TAR_H

#include <stddef.h>
#include <stdint.h>

#define TAR_BLOCK 512
/* A member name (GNU long name, pax path) longer than this is refused. */
#define TAR_MAX_NAME 4096
/* A pax extended header larger than this is refused. */
#define TAR_MAX_PAX (1u << 20)

struct tar_member {
	uint64_t name_off; /* into tar_index.names, NUL-terminated */
	uint64_t offset;   /* of the member's data in the archive */
	uint64_t size;
};

struct tar_index {
	struct tar_member *v;
	size_t n, cap;
	char *names;
	size_t names_len, names_cap;
};

/*
 * Read len bytes at off into buf: the count read (short only at the end of
 * the archive), or -errno.
 */
typedef int64_t (*tar_read_fn)(void *ctx, uint64_t off, void *buf, size_t len);

/*
 * Index the archive of `size` bytes that `read` reads. On success *out holds
 * the members (zeroed first). On failure: -EBADMSG (malformed or truncated),
 * -EFBIG (over max_members), -ENOMEM or the reader's -errno, with the
 * offset of the header at fault in *err_off and the reason in why.
 */
int tar_index_build(tar_read_fn read, void *ctx, uint64_t size, uint64_t max_members, struct tar_index *out,
		    uint64_t *err_off, char *why, size_t whylen);

static inline const char *tar_member_name(const struct tar_index *t, size_t i)
{
	return t->names + t->v[i].name_off;
}

/* Accepts a zeroed index. */
void tar_index_free(struct tar_index *t);

/* Append a member (used by the index cache's loader too). 0 or -ENOMEM. */
int tar_index_add(struct tar_index *t, const char *name, size_t name_len, uint64_t offset, uint64_t size);

#endif
