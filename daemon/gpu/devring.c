/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>

#include "devring.h"

int devring_init(struct devring *r, uint32_t slot_count, const struct devring_ops *ops, void *backend)
{
	enum devslot *state;
	uint64_t *released;

	if (slot_count == 0 || !ops || !ops->submit || !ops->close)
		return -EINVAL;
	state = calloc(slot_count, sizeof(*state));
	released = calloc(slot_count, sizeof(*released));
	if (!state || !released) {
		free(state);
		free(released);
		return -ENOMEM;
	}
	*r = (struct devring){.ops = ops,
			      .backend = backend,
			      .slot_count = slot_count,
			      .state = state,
			      .released = released};
	return 0;
}

void devring_release_state(struct devring *r)
{
	if (!r)
		return;
	free(r->state);
	free(r->released);
	r->state = NULL;
	r->released = NULL;
}

/* Move `slot` from `from` to `to`; -EINVAL if it is elsewhere. */
static int move(struct devring *r, uint32_t slot, enum devslot from, enum devslot to)
{
	if (slot >= r->slot_count || r->state[slot] != from)
		return -EINVAL;
	r->state[slot] = to;
	return 0;
}

static void maybe_close_backend(struct devring *r)
{
	if (r->closing && r->copying == 0 && !r->closed)
		r->ops->close(r->backend); /* devring_closed() follows, now or later */
}

int devring_submit(struct devring *r, uint32_t slot, uint32_t count)
{
	int err;

	if (r->closing)
		return -ESHUTDOWN;
	if (slot >= r->slot_count || r->state[slot] != DEVSLOT_FREE)
		return -EBUSY;
	if (count == 0)
		return -EINVAL;
	err = r->ops->submit(r->backend, slot, count);
	if (err < 0) {
		r->failures++;
		return err;
	}
	r->state[slot] = DEVSLOT_COPYING;
	r->copying++;
	return 0;
}

int devring_copied(struct devring *r, uint32_t slot, int status)
{
	if (move(r, slot, DEVSLOT_COPYING, status < 0 ? DEVSLOT_FREE : DEVSLOT_READY) < 0)
		return -EINVAL;
	r->copying--;
	if (status < 0)
		r->failures++;
	else
		r->copies++;
	maybe_close_backend(r);
	return status;
}

int devring_deliver(struct devring *r, uint32_t slot)
{
	return move(r, slot, DEVSLOT_READY, DEVSLOT_CLIENT);
}

int devring_release(struct devring *r, uint32_t slot)
{
	int err = move(r, slot, DEVSLOT_CLIENT, DEVSLOT_FREE);

	if (err == 0)
		r->released[slot]++;
	return err;
}

int devring_drop(struct devring *r, uint32_t slot)
{
	return move(r, slot, DEVSLOT_READY, DEVSLOT_FREE);
}

void devring_close(struct devring *r)
{
	if (r->closing)
		return;
	r->closing = true;
	/* Even with no copy in flight here: the backend may have given up on
	 * one (its watchdog) that still waits on the GPU, and would never drain. */
	if (r->ops->unblock)
		r->ops->unblock(r->backend);
	maybe_close_backend(r);
}

void devring_closed(struct devring *r)
{
	r->closed = true;
}
