/* SPDX-License-Identifier: MIT */
/*
 * A client's batch ring: one sealed memfd of slot_count slots, mapped
 * read-write by the daemon (populated at creation, so workers never take
 * first-touch faults) and handed to the client as a separate read-only fd.
 * Seals: no grow, no shrink, no further seals; the client can check them.
 */
#ifndef STOKER_RING_H
#define STOKER_RING_H

#include <stddef.h>
#include <stdint.h>

struct ring {
	int fd;
	uint8_t *base;
	size_t bytes;
	size_t slot_bytes;
	uint32_t slot_count;
};

int ring_create(uint32_t slot_count, size_t slot_bytes, struct ring **out);
void ring_free(struct ring *r);
/* A new O_RDONLY descriptor of the ring for the client (O_CLOEXEC). */
int ring_reader_fd(const struct ring *r);

static inline uint8_t *ring_slot(const struct ring *r, uint32_t slot)
{
	return r->base + (size_t)slot * r->slot_bytes;
}

#endif
