/* SPDX-License-Identifier: MIT */
/*
 * A client's attachment: its data set and plan, its ring of batch slots, and
 * the epoch being produced. Loop thread only.
 *
 * Slot life: FREE -> FILLING (a job in the pool) -> READY (filled, waiting
 * for its turn: batches go out in order) -> CLIENT (announced with
 * BatchReady, until the client releases it) -> FREE. A StartEpoch moves the
 * session to a new generation: READY slots of the old one are freed, FILLING
 * ones are cancelled and freed when their job returns; CLIENT ones stay
 * until released.
 */
#ifndef STOKER_SESSION_H
#define STOKER_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "plan.h"
#include "workers.h"

enum slot_state {
	SLOT_FREE,
	SLOT_FILLING,
	SLOT_READY,
	SLOT_CLIENT,
};

struct session {
	struct daemon *d;
	struct conn *conn; /* NULL once the client is gone */
	struct dataset *ds;
	struct ring *ring;
	struct plan_spec plan;
	struct transform_spec spec;
	size_t labels_offset, indices_offset;

	enum slot_state *slot_state;
	struct batch_job *jobs;  /* one per slot, reused */
	uint64_t *job_orders;    /* [slot_count][batch_size] */

	uint64_t epoch;
	uint32_t generation;
	uint64_t *order; /* this epoch's indices for this rank */
	uint64_t batches_per_epoch;
	uint64_t next_schedule; /* next batch to hand to the pool */
	uint64_t next_deliver;  /* next batch to announce */
	bool end_sent;
	uint32_t inflight; /* jobs in the pool */
	uint32_t hold;     /* handlers on the stack using it (session.c) */

	/* Statistics. */
	uint64_t batches, images;
	uint64_t wait_ns;
	uint32_t pid;
	char *dataset_name;
};

#endif
