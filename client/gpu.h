/* SPDX-License-Identifier: MIT */
/*
 * libstoker's one CUDA module: every CUDA call the library makes. The driver
 * is loaded at run time (proto/cudadrv.h); built without CUDA or run where
 * it is not usable, each function fails with -ENOSYS/-ENOENT/-ENODEV and
 * says why. Calls run in the device's primary context (the one PyTorch and
 * the CUDA runtime use), pushed and popped around each call, so the
 * caller's current context is left as it was.
 */
#ifndef STOKER_CLIENT_GPU_H
#define STOKER_CLIENT_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "stoker.pb-c.h"

#define CLIENT_GPU_UUID_BYTES 16

struct client_gpu; /* an imported device ring */
struct client_pin; /* a page-locked host range */

/* This process's CUDA device `ordinal`: its UUID. */
int client_gpu_resolve(int ordinal, uint8_t uuid[CLIENT_GPU_UUID_BYTES], char *why, size_t whysize);

/* Import the ring the daemon sent (`fd` stays the caller's), open its
 * events, map it on `ordinal` (which must be the GPU the ring is on). */
int client_gpu_import(int ordinal, int fd, const Stoker__DeviceRing *dr, struct client_gpu **out, char *why,
		      size_t whysize);
/* Unmaps, closes the events. Accepts NULL. */
void client_gpu_free(struct client_gpu *cg);
uint64_t client_gpu_slot_ptr(const struct client_gpu *cg, uint32_t slot);
/* Make `stream` (a CUstream; NULL: the legacy default stream) wait for
 * slot's ready event. No host wait. */
int client_gpu_wait(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize);
/* Record slot's release event on `stream`: the daemon's next write into
 * the slot waits for the work queued on it so far. */
int client_gpu_record_release(struct client_gpu *cg, uint32_t slot, void *stream, char *why, size_t whysize);

/* Page-lock a read-only mapping for every CUDA context
 * (CU_MEMHOSTREGISTER_PORTABLE | READ_ONLY), so that copies from it are
 * asynchronous DMA. */
int client_pin(void *addr, size_t bytes, struct client_pin **out, char *why, size_t whysize);
void client_unpin(struct client_pin *p);

#endif
