/* SPDX-License-Identifier: MIT */
/*
 * Daemon settings. Layers, each overriding the one before:
 *   built-in defaults
 *   <root>PREFIX/lib/stoker/stoker.conf       (the package's; /usr/lib/...
 *                                              for a PREFIX=/usr build)
 *   <root>/etc/stoker/stoker.conf             (the administrator's)
 *   <root>/etc/stoker/stoker.conf.d/ *.conf   (drop-ins, in strcmp order)
 *   command-line flags
 *   runtime changes (stokerctl set; lost at restart)
 * An explicit --config FILE replaces the three file layers. Every key is
 * documented in config/stoker.conf; each value remembers its origin.
 */
#ifndef STOKER_CONFIG_H
#define STOKER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"

#define CONFIG_MAX_KEYS 48
#define CONFIG_ORIGIN_MAX 256
#define CONFIG_VALUE_MAX 512 /* longest value text (a path) */
#define CONFIG_NAME_MAX 64   /* user and group names */

struct config {
	char socket_path[108];              /* sun_path's size */
	uint32_t socket_mode;               /* when stokerd binds the socket itself */
	char socket_group[CONFIG_NAME_MAX]; /* "": the daemon's group */
	char admin_group[CONFIG_NAME_MAX];  /* "": root and the daemon's user only */
	uint32_t workers;                   /* 0: the usable cores */
	uint32_t prefetch;                  /* default batches ready ahead of a client */
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
	uint64_t memory_budget;                  /* cache + every ring; 0: half the memory */
	uint64_t cache_bytes;                    /* 0: half of memory_budget */
	uint64_t gpu_memory_budget;              /* per GPU, every client's device ring; 0: the GPU's free memory */
	bool cache_bytes_set;                    /* cache_bytes given explicitly (0 = no cache) */
	uint32_t cache_policy;                   /* enum cache_policy */
	uint32_t cache_decoded_side;             /* 0: no decoded tier */
	uint32_t stop_timeout_ms;                /* in-flight work gets this long at stop */
	uint32_t stopped_lease_ms;               /* a stopped client keeps its session this long; 0: for ever */
	uint32_t user_mode;                      /* 1: one user's own daemon (usermode.c) */
	uint32_t idle_exit_s;                    /* user mode: exit after this long with no client; 0: never */
	char metrics_textfile[CONFIG_VALUE_MAX]; /* "": none */
	uint32_t metrics_interval_ms;
	char metrics_listen[64];                /* "": none; else a loopback host:port */
	char shard_index_dir[CONFIG_VALUE_MAX]; /* tar shard indexes; "": $CACHE_DIRECTORY/shards, or none */
	enum log_level log_level;
	/* Objects over HTTP/S3 (fetch.h, s3.h). */
	uint32_t fetch_max_inflight; /* transfers at once, all data sets */
	uint32_t fetch_connect_timeout_ms;
	uint32_t fetch_stall_timeout_ms; /* no byte for this long: retried */
	uint32_t fetch_retries;
	uint32_t fetch_backoff_ms;     /* the first retry's delay bound; doubles */
	uint32_t remote_listing_ttl_s; /* listings reused this long */
	char s3_endpoint[512];         /* "": AWS_ENDPOINT_URL(_S3), else AWS */
	char s3_region[64];            /* "": AWS_REGION, AWS_DEFAULT_REGION, us-east-1 */
	char s3_profile[128];          /* "": AWS_PROFILE, else "default" */
	char s3_credentials_file[512]; /* "": AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials */
	/* s3:// prefixes (space or comma separated) every client reads with
	 * the node's credentials; elsewhere a client's own keys are used. */
	char shared_remote_prefixes[2048];
};

/* Where each key's value came from: "default", a file path, "command
 * line", or "runtime (stokerctl set)". Indexed like the key table. */
struct config_origins {
	char key[CONFIG_MAX_KEYS][CONFIG_ORIGIN_MAX];
};

/* The files a layered load read, in order (more is an error). */
#define CONFIG_MAX_FILES 64
struct config_files {
	size_t n;
	char path[CONFIG_MAX_FILES][CONFIG_ORIGIN_MAX];
};

/* Usable memory: MemTotal, capped by a cgroup v2 memory.max. */
uint64_t config_usable_memory(void);
/* Fill memory_budget and cache_bytes left at "auto". */
void config_resolve_memory(struct config *c);

void config_defaults(struct config *c);
/* Every origin "default". */
void config_origins_init(struct config_origins *o);

/* Apply one key; -EINVAL for a bad value, -ENOENT for an unknown key. */
int config_set(struct config *c, const char *key, const char *value);
/* The same, recording `origin` for the key in o (o may be NULL). */
int config_set_from(struct config *c, struct config_origins *o, const char *key, const char *value, const char *origin);

/* Read an INI file ([stokerd] section). -errno if unreadable; a bad line
 * fails the load with its line number in *bad_line. */
int config_load(struct config *c, const char *path, int *bad_line);

/*
 * The file layers under `root` ("" or NULL: /), or only `file` if given.
 * Missing layered files are skipped; an unreadable one, a missing `file` or
 * a bad line fails with a message in err ("PATH:LINE: ..."). o and files
 * may be NULL.
 */
int config_load_layers(struct config *c, struct config_origins *o, struct config_files *files, const char *root,
		       const char *file, char *errbuf, size_t errlen);

/* What the daemon was told beside the files, by key index (NULL: nothing):
 * flags on its command line, and values set while running (stokerctl set). */
#define CONFIG_ORIGIN_CMDLINE "command line"
#define CONFIG_ORIGIN_RUNTIME "runtime (stokerctl set)"
struct config_overrides {
	const char *const *cmdline; /* [config_key_count()] or NULL */
	const char *const *runtime; /* [config_key_count()] or NULL */
};

/*
 * The whole layering: defaults < the package's file < /etc's < its drop-ins
 * (config_load_layers) < command-line flags < runtime sets, each key's
 * origin recorded in o (may be NULL). Not validated (config_validate).
 * A bad flag fails with its key and value in err; a runtime value, checked
 * when it was set, fails with -EINVAL.
 */
int config_load_all(struct config *c, struct config_origins *o, struct config_files *files, const char *root,
		    const char *file, const struct config_overrides *ov, char *errbuf, size_t errlen);

/* Checks across keys and against the system (group names, addresses):
 * -EINVAL with a message in err. */
int config_validate(const struct config *c, char *errbuf, size_t errlen);

/* The key table: names, whether a change applies while running, and the
 * value of key i as text that config_set accepts. */
size_t config_key_count(void);
const char *config_key_name(size_t i);
int config_key_index(const char *name); /* -ENOENT */
bool config_key_live(size_t i);
void config_format(const struct config *c, size_t i, char *buf, size_t size);

/* A group's id by name; -ENOENT if there is no such group. */
int config_group_id(const char *name, uint32_t *gid);

/* Usable CPUs: the affinity mask, capped by a cgroup v2 cpu.max quota. */
uint32_t config_usable_cpus(void);

#endif
