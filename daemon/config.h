/* SPDX-License-Identifier: MIT */
/*
 * Daemon settings: built-in defaults, then the INI file, then command-line
 * flags. Every key is documented in config/stoker.conf.
 */
#ifndef STOKER_CONFIG_H
#define STOKER_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "log.h"

struct config {
	char socket_path[108]; /* sun_path's size */
	uint32_t workers;      /* 0: the usable cores */
	uint32_t prefetch;     /* default batches ready ahead of a client */
	uint32_t max_prefetch;
	uint32_t max_batch_size;
	uint32_t max_image_size;
	uint64_t max_ring_bytes; /* per client */
	uint32_t max_clients;
	uint32_t max_frame_bytes;
	uint64_t max_image_pixels;
	uint64_t max_file_bytes;
	uint32_t max_scans;
	uint32_t replace_attempts;
	uint64_t memory_budget; /* cache + every ring; 0: half the memory */
	uint64_t cache_bytes;   /* 0: half of memory_budget */
	bool cache_bytes_set;   /* cache_bytes given explicitly (0 = no cache) */
	uint32_t cache_policy;  /* enum cache_policy */
	uint32_t cache_decoded_side; /* 0: no decoded tier */
	enum log_level log_level;
};

/* Usable memory: MemTotal, capped by a cgroup v2 memory.max. */
uint64_t config_usable_memory(void);
/* Fill memory_budget and cache_bytes left at "auto". */
void config_resolve_memory(struct config *c);

void config_defaults(struct config *c);

/* Apply one key; -EINVAL for a bad value, -ENOENT for an unknown key. */
int config_set(struct config *c, const char *key, const char *value);

/* Read an INI file ([stokerd] section). -errno if unreadable; a bad line
 * fails the load with its line number in *bad_line. */
int config_load(struct config *c, const char *path, int *bad_line);

/* Usable CPUs: the affinity mask, capped by a cgroup v2 cpu.max quota. */
uint32_t config_usable_cpus(void);

#endif
