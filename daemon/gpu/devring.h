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
 * release of the slot, so a slot the client may still read is never
 * overwritten: each slot has a release word in memory both sides map, which
 * the client advances on its own stream (cuStreamWriteValue64) behind the
 * work that reads the slot, and the slot's next copy waits
 * (cuStreamWaitValue64) until the word reaches released[slot], the number
 * of releases of that slot so far. Once `copied` has come back the host
 * slot is no longer read by the GPU and may be refilled.
 *
 * Closing (the client has gone) first asks the backend to `unblock`: a
 * client that died with work queued before its release never advances its
 * word, so the backend writes every word to released[] from the CPU and the
 * copies waiting on them run. Then it waits for every copy in flight and
 * asks the backend to close, whose `closed` ends the ring.
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
	/* The client has gone: satisfy every wait on its release words now
	 * (each word := devring_release_target()). Optional. */
	void (*unblock)(void *backend);
};

struct devring {
	const struct devring_ops *ops;
	void *backend;
	uint32_t slot_count;
	enum devslot *state; /* [slot_count] */
	uint64_t *released;  /* [slot_count]: releases of each slot so far */
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
/* CLIENT -> FREE: the client advanced the slot's release word (on its stream,
 * or from the CPU for a batch it never took) before saying so; counts it. */
int devring_release(struct devring *r, uint32_t slot);
/* READY -> FREE: a batch nobody will take. */
int devring_drop(struct devring *r, uint32_t slot);
/* The client has gone: no new copies; unblock the backend's waits on its
 * release words, close the backend once the copies in flight are back. */
void devring_close(struct devring *r);
/* The backend is closed (called by it). */
void devring_closed(struct devring *r);

static inline enum devslot devring_state(const struct devring *r, uint32_t slot)
{
	return r->state[slot];
}

/* The value slot's release word must reach before the slot is written:
 * the client's releases of it so far (it writes the same count). */
static inline uint64_t devring_release_target(const struct devring *r, uint32_t slot)
{
	return r->released[slot];
}

/* Whether a release word's value `word` satisfies `target` (the cyclic
 * comparison cuStreamWaitValue64's GEQ makes: (int64_t)(word - target) >= 0). */
static inline bool devring_word_reached(uint64_t word, uint64_t target)
{
	return (int64_t)(word - target) >= 0;
}

#endif
