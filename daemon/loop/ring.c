/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ring.h"

int ring_create(uint32_t slot_count, size_t slot_bytes, struct ring **out)
{
	struct ring *r;
	size_t bytes;
	int fd, err;

	if (slot_count == 0 || slot_bytes == 0 || slot_bytes > SIZE_MAX / slot_count)
		return -EINVAL;
	bytes = slot_bytes * slot_count;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	fd = memfd_create("stoker-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0) {
		err = -errno;
		goto fail;
	}
	if (ftruncate(fd, (off_t)bytes) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		err = -errno;
		goto fail;
	}
	/* Allocate every page now: a ring that does not fit fails here with
	 * ENOSPC/ENOMEM rather than as SIGBUS in a worker. MAP_POPULATE then
	 * maps them, so workers take no first-touch faults. */
	if (fallocate(fd, 0, 0, (off_t)bytes) < 0 && errno != EOPNOTSUPP) {
		err = -errno;
		goto fail;
	}
	r->base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
	if (r->base == MAP_FAILED) {
		r->base = NULL;
		err = -errno;
		goto fail;
	}
	r->fd = fd;
	r->bytes = bytes;
	r->slot_bytes = slot_bytes;
	r->slot_count = slot_count;
	*out = r;
	return 0;
fail:
	if (r->base)
		munmap(r->base, bytes);
	if (fd >= 0)
		close(fd);
	free(r);
	return err;
}

void ring_free(struct ring *r)
{
	if (!r)
		return;
	munmap(r->base, r->bytes);
	close(r->fd);
	free(r);
}

int ring_reader_fd(const struct ring *r)
{
	char path[64];
	int fd;

	/* Reopening through /proc gives a description of its own, opened
	 * O_RDONLY: the client cannot map it writable or add write access. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", r->fd);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}
