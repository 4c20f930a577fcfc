/* SPDX-License-Identifier: MIT */
/*
 * Delivery into GPU memory: the daemon's one CUDA module. Every CUDA call
 * stokerd makes is in gpu.c, on its one CUDA thread (started on the first
 * device attach; never on a node where nobody asks for a GPU), so the loop
 * thread never waits on the driver. The driver is loaded at run time
 * (proto/cudadrv.h); built without CUDA, or on a node without a driver or
 * GPU, an open fails with the reason and nothing else changes.
 *
 * A client's device ring (struct gpu_ring): one allocation from CUDA's VMM
 * API (cuMemCreate, POSIX fd handle, exported once, sent to the client like
 * the memfd ring) of slot_count image slots; a release word per slot in a
 * small sealed memfd both sides map (devring.h: the client advances it on
 * its stream, the ring's copies wait on it, the daemon writes it from the
 * CPU when the client has gone); a stream of its own (a client that never releases stalls only
 * its own stream); the host ring page-locked (cuMemHostRegister, slot by
 * slot) for DMA; for float output a uint8 staging buffer (stream-ordered:
 * cuMemAllocAsync/cuMemFreeAsync, never a device-wide cuMemFree) and the
 * normalisation table (augment.h: transform_lut_build) on the device.
 *
 * Requests go to the CUDA thread on a mutex-guarded queue; results come back
 * to the loop with uv_async_send (opened, copied, closed), the copies' from
 * CUDA's own callback thread (cuLaunchHostFunc) without a CUDA call. A ring's
 * setup runs in steps, each queued behind the requests already waiting, so
 * opening a ring does not hold up other clients' copies. A watchdog on the
 * CUDA thread (gpuwatch.h) queries the streams of copies outstanding too
 * long and fails their rings with the reason. A GPU's primary context is
 * released when its last ring is gone. docs/threads.md has the lock order.
 */
#ifndef STOKER_GPU_H
#define STOKER_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "augment.h"
#include "devring.h"

#define GPU_UUID_BYTES 16
/* A device ring's release words: one uint64_t per slot, at offset 0 of their memfd. */
#define GPU_RELEASE_WORDS_BYTES(slots) ((size_t)(slots) * sizeof(uint64_t))

struct gpu;
struct gpu_ring;

/* What a device ring is for. */
struct gpu_ring_params {
	char device[32];              /* "cuda:N" as the client said, for messages */
	uint8_t uuid[GPU_UUID_BYTES]; /* the GPU */
	bool has_uuid;                /* false: the client could not resolve it */
	uint32_t slot_count;
	uint32_t batch_size, image_size;
	enum sample_dtype dtype; /* on the device; the host ring holds uint8 */
	union transform_lut lut; /* float dtypes */
	uint8_t *host_base;      /* the host ring, page aligned */
	size_t host_bytes, host_slot_bytes;
	uint64_t budget; /* gpu_memory_budget; 0: free memory only */
};

/* What the client is sent (DeviceRing) once the ring is open. */
struct gpu_ring_export {
	int fd;       /* the allocation's POSIX fd; the caller takes it (-1 after) */
	int words_fd; /* the release words' memfd (read-write, sealed against resizing); likewise */
	uint64_t slot_bytes, ring_bytes, device_bytes;
	uint8_t uuid[GPU_UUID_BYTES];
};

/* Results, on the loop thread. */
struct gpu_callbacks {
	/* The open finished: `r` (NULL on failure, with `err` and `why`). */
	void (*opened)(void *owner, struct gpu_ring *r, int err, const char *why);
};

/* Loop thread: no CUDA yet (the driver loads at the first open). */
int gpu_new(uv_loop_t *loop, struct gpu **out);
/* At stop: ends the CUDA thread once the rings are closed; never keeps the
 * loop alive. Accepts NULL. */
void gpu_free(struct gpu *g);
/* "unused", "usable: N GPUs (driver X.Y)" or why CUDA is not usable. */
const char *gpu_status(const struct gpu *g);

/* Open a device ring (asynchronously). 0, or -ENOMEM / -ESHUTDOWN now. */
int gpu_ring_open(struct gpu *g, const struct gpu_ring_params *p, const struct gpu_callbacks *cb, void *owner);
/* The ring's slot logic: submit copies, deliver, release, close with it.
 * `closed` is called (loop thread) once the ring's memory is gone and the
 * host ring is no longer registered; the ring is freed after it returns. */
struct devring *gpu_ring_devring(struct gpu_ring *r);
void gpu_ring_set_handlers(struct gpu_ring *r, void (*copied)(void *owner, uint32_t slot, int err),
			   void (*closed)(void *owner));
struct gpu_ring_export *gpu_ring_export(struct gpu_ring *r);
/* Device bytes the ring holds (ring, staging, table). */
uint64_t gpu_ring_bytes(const struct gpu_ring *r);
/* Why the ring's last copy failed ("" if none did): for the client's error. */
const char *gpu_ring_failure(const struct gpu_ring *r);

#endif
