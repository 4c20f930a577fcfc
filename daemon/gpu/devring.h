/* SPDX-License-Identifier: MIT */
/*
 * A CUDA client's device ring, as slot ownership: which device slot may be
 * written, which holds a batch on its way, which the client holds. Pure
 * logic over a backend (daemon/gpu/gpu.c's CUDA stream; plain memory in
 * tests/unit/test_devring.c), so the rules are tested without a GPU.
 * Loop thread only.
 *
 * Device slot i pairs with host slot i. Its life:
 *   FREE --submit--> COPYING --copied--> READY --deliver--> CLIENT --release--> FREE
 * and READY --drop--> FREE (a batch of an abandoned epoch). A copy is only
 * ever submitted into a FREE slot; the backend orders it after the client's
 * release of the slot (its stream waits on the release event), so a slot
 * the client may still read is never overwritten. Once `copied` has come
 * back the host slot is no longer read by the GPU and may be refilled.
 * Closing waits for every copy in flight, then asks the backend to close,
 * whose `closed` ends the ring.
 */
#ifndef STOKER_DEVRING_H
#define STOKER_DEVRING_H

#include <stdbool.h>
#include <stdint.h>

enum devslot {
	DEVSLOT_FREE,
	DEVSLOT_COPYING,
	DEVSLOT_READY,
	DEVSLOT_CLIENT,
};

struct devring_ops {
	/* Queue the copy (and conversion) of host slot `slot`'s first `count`
	 * images into device slot `slot`, after the client's last release of
	 * it; the backend calls devring_copied() when it is done. 0 or -errno
	 * (nothing was queued). */
	int (*submit)(void *backend, uint32_t slot, uint32_t count);
	/* No copy is in flight and none will come: release everything; the
	 * backend calls devring_closed() when it has. */
	void (*close)(void *backend);
};

struct devring {
	const struct devring_ops *ops;
	void *backend;
	uint32_t slot_count;
	enum devslot *state; /* [slot_count] */
	uint32_t copying;    /* copies in flight */
	bool closing;        /* devring_close() was called */
	bool closed;         /* the backend has released everything */
	uint64_t copies, failures;
};

int devring_init(struct devring *r, uint32_t slot_count, const struct devring_ops *ops, void *backend);
/* Frees the state only: the ring must be closed, or never have submitted. */
void devring_release_state(struct devring *r);

/* FREE -> COPYING. -EBUSY: the slot is not free (the caller's bug);
 * -ESHUTDOWN: closing; or the backend's error (the slot stays FREE). */
int devring_submit(struct devring *r, uint32_t slot, uint32_t count);
/* The backend finished the slot's copy, with `status` 0 or -errno: READY
 * on success, FREE on failure. Returns status, -EINVAL if no copy was in
 * flight there. Closes the ring if it was waiting for this copy. */
int devring_copied(struct devring *r, uint32_t slot, int status);
/* READY -> CLIENT. */
int devring_deliver(struct devring *r, uint32_t slot);
/* CLIENT -> FREE: the client recorded its release event before saying so. */
int devring_release(struct devring *r, uint32_t slot);
/* READY -> FREE: a batch nobody will take. */
int devring_drop(struct devring *r, uint32_t slot);
/* No new copies; close the backend once the ones in flight are back. */
void devring_close(struct devring *r);
/* The backend is closed (called by it). */
void devring_closed(struct devring *r);

static inline enum devslot devring_state(const struct devring *r, uint32_t slot)
{
	return r->state[slot];
}

#endif
