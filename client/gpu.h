/* SPDX-License-Identifier: MIT */
/*
 * libstoker's one CUDA module: every CUDA call the library makes. The driver
 * is loaded at run time (proto/cudadrv.h); built without CUDA or run where
 * it is not usable, each function fails with -ENOSYS/-ENOENT/-ENODEV and
 * says why. Device-ring calls run in the device's primary context (the one
 * PyTorch and the CUDA runtime use), pushed and popped around each call, so
 * the caller's current context is left as it was.
 *
 * A device ring's slots are ordered by release words (proto/stoker.proto,
 * DeviceRing): word i counts this process's releases of slot i; a release
 * advances it on the stream that read the slot (cuStreamWriteValue64) or,
 * for a batch never taken, from the CPU. Closing waits until every write
 * has landed before unmapping, so no queued kernel reads unmapped memory.
 */
#ifndef STOKER_CLIENT_GPU_H
#define STOKER_CLIENT_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "stoker.pb-c.h"

#define CLIENT_GPU_UUID_BYTES 16

struct client_gpu; /* an imported device ring */
struct client_pin; /* a page-locked host range */

/* This process's CUDA device `ordinal`: its UUID, once it is known to serve
 * a device ring: compute mode (-EPERM: PROHIBITED or EXCLUSIVE_PROCESS) and
 * capabilities (-ENOTSUP), refused with the reason before attaching. */
int client_gpu_resolve(int ordinal, uint8_t uuid[CLIENT_GPU_UUID_BYTES], char *why, size_t whysize);

/* Import the ring the daemon sent (`fd` stays the caller's), map it on
 * `ordinal` (which must be the GPU the ring is on), and map its release
 * words from `words_fd` (also the caller's). */
int client_gpu_import(int ordinal, int fd, int words_fd, const Stoker__DeviceRing *dr, struct client_gpu **out,
		      char *why, size_t whysize);
/* Waits for every release written so far to land (the work queued before
 * them has run), then unmaps. Release the batches still held first
 * (client_gpu_release on their streams). Accepts NULL. */
void client_gpu_free(struct client_gpu *cg);
uint64_t client_gpu_slot_ptr(const struct client_gpu *cg, uint32_t slot);
/* Advance slot's release word on `stream` (a CUstream; NULL: the legacy
 * default stream): the daemon's next write into the slot waits for the
 * work queued on it so far. */
int client_gpu_release(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize);
/* Advance it from the CPU: a batch this process never handed out. */
void client_gpu_release_untaken(struct client_gpu *cg, uint32_t slot);

/* Page-lock a read-only mapping for every CUDA context
 * (CU_MEMHOSTREGISTER_PORTABLE | READ_ONLY), so that copies from it are
 * asynchronous DMA. In the calling thread's current context, else a primary
 * context the process already has active (the one its framework made);
 * never one created for this: -ENODEV says so. */
int client_pin(void *addr, size_t bytes, struct client_pin **out, char *why, size_t whysize);
void client_unpin(struct client_pin *p);

#endif
