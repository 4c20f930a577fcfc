/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"

void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->socket_path, sizeof(c->socket_path), "%s", "/run/stoker/stoker.sock");
	c->workers = 0;
	c->prefetch = 4;
	c->max_prefetch = 32;
	c->max_batch_size = 4096;
	c->max_image_size = 2048;
	c->max_ring_bytes = 4ull << 30;
	c->max_clients = 256;
	c->max_frame_bytes = 64u << 10;
	c->max_image_pixels = 89478485; /* Pillow's decompression-bomb limit */
	c->max_file_bytes = 256ull << 20;
	c->max_scans = 500;
	c->replace_attempts = 16;
	c->log_level = LOG_LVL_INFO;
}

/* "123", "64K", "4M", "2G", "1T" (binary multiples). */
static int parse_size(const char *s, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	unsigned shift = 0;
	char *end;

	if (!*s || *s == '-')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	switch (*end) {
	case '\0':
		break;
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	default:
		return -EINVAL;
	}
	if (*end == 'i' || *end == 'B')
		end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
	if (*end != '\0')
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	v <<= shift;
	if (v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
	uint64_t v;
	int r = parse_size(s, hi, &v);

	if (r < 0)
		return r;
	if (v < lo)
		return -ERANGE;
	*out = (uint32_t)v;
	return 0;
}

struct config_key {
	const char *name;
	enum { KEY_U32, KEY_U64, KEY_PATH, KEY_LOG_LEVEL, KEY_CACHE_BYTES, KEY_CACHE_POLICY } type;
	size_t offset;
	uint64_t lo, hi;
};

#define U32(n, lo, hi) {#n, KEY_U32, offsetof(struct config, n), lo, hi}
#define U64(n, lo, hi) {#n, KEY_U64, offsetof(struct config, n), lo, hi}
static const struct config_key config_keys[] = {
	{"socket", KEY_PATH, offsetof(struct config, socket_path), 0, 0},
	U32(workers, 0, 4096),
	U32(prefetch, 1, 1024),
	U32(max_prefetch, 1, 1024),
	U32(max_batch_size, 1, 1u << 20),
	U32(max_image_size, 8, 16384),
	U64(max_ring_bytes, 1u << 20, 1ull << 44),
	U32(max_clients, 1, 1u << 20),
	U32(max_frame_bytes, 1024, 16u << 20),
	U64(max_image_pixels, 1, 1ull << 34),
	U64(max_file_bytes, 1024, 1ull << 34),
	U32(max_scans, 1, 100000),
	U32(replace_attempts, 1, 1024),
	U64(memory_budget, 0, 1ull << 50),
	{"cache_bytes", KEY_CACHE_BYTES, offsetof(struct config, cache_bytes), 0, 1ull << 50},
	{"cache_policy", KEY_CACHE_POLICY, offsetof(struct config, cache_policy), 0, 0},
	U32(cache_decoded_side, 0, 16384),
	{"log_level", KEY_LOG_LEVEL, offsetof(struct config, log_level), 0, 0},
};

int config_set(struct config *c, const char *key, const char *value)
{
	for (size_t i = 0; i < sizeof(config_keys) / sizeof(config_keys[0]); i++) {
		const struct config_key *k = &config_keys[i];
		char *field = (char *)c + k->offset;
		uint64_t v64;
		uint32_t v32;
		int r;

		if (strcmp(k->name, key) != 0)
			continue;
		switch (k->type) {
		case KEY_U32:
			r = parse_u32(value, (uint32_t)k->lo, (uint32_t)k->hi, &v32);
			if (r == 0)
				memcpy(field, &v32, sizeof(v32));
			return r < 0 ? -EINVAL : 0;
		case KEY_U64:
			r = parse_size(value, k->hi, &v64);
			if (r == 0 && v64 < k->lo)
				r = -ERANGE;
			if (r == 0)
				memcpy(field, &v64, sizeof(v64));
			return r < 0 ? -EINVAL : 0;
		case KEY_PATH:
			if (!*value || strlen(value) >= sizeof(c->socket_path))
				return -EINVAL;
			snprintf(c->socket_path, sizeof(c->socket_path), "%s", value);
			return 0;
		case KEY_LOG_LEVEL:
			return log_level_from_string(value, &c->log_level);
		case KEY_CACHE_BYTES:
			if (strcmp(value, "auto") == 0) {
				c->cache_bytes_set = false;
				return 0;
			}
			r = parse_size(value, k->hi, &v64);
			if (r < 0)
				return -EINVAL;
			c->cache_bytes = v64;
			c->cache_bytes_set = true;
			return 0;
		case KEY_CACHE_POLICY:
			if (strcmp(value, "minio") == 0)
				c->cache_policy = 0;
			else if (strcmp(value, "lru") == 0)
				c->cache_policy = 1;
			else
				return -EINVAL;
			return 0;
		}
	}
	return -ENOENT;
}

struct config_load_state {
	struct config *c;
	int error;
};

static int config_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct config_load_state *st = user;
	int r;

	if (strcasecmp(section, "stokerd") != 0) {
		st->error = -ENOENT;
		return 0;
	}
	r = config_set(st->c, name, value);
	if (r < 0) {
		st->error = r;
		return 0;
	}
	return 1;
}

int config_load(struct config *c, const char *path, int *bad_line)
{
	struct config_load_state st = {.c = c, .error = 0};
	FILE *f;
	int line;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	line = ini_parse_file(f, config_ini_handler, &st);
	fclose(f);
	if (line != 0) {
		*bad_line = line;
		return st.error < 0 ? st.error : -EINVAL;
	}
	return 0;
}

/* The path of `file` in this process's cgroup v2 directory. */
static int cgroup_file(const char *file, char *path, size_t size)
{
	char line[256];
	int r = -ENOENT;
	FILE *f = fopen("/proc/self/cgroup", "re");

	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, size, "/sys/fs/cgroup%s/%s", line + 3, file);
			r = 0;
			break;
		}
	}
	fclose(f);
	return r;
}

/* cgroup v2: "max 100000" or "<quota> <period>" in cpu.max. */
static uint32_t cgroup_cpu_limit(void)
{
	char path[PATH_MAX], buf[128];
	unsigned long long quota, period;
	uint32_t limit = 0;
	FILE *f;

	if (cgroup_file("cpu.max", path, sizeof(path)) < 0)
		return 0;
	f = fopen(path, "re");
	if (!f)
		return 0;
	if (fgets(buf, sizeof(buf), f) && sscanf(buf, "%llu %llu", &quota, &period) == 2 && period > 0)
		limit = (uint32_t)((quota + period - 1) / period);
	fclose(f);
	return limit;
}

/* One number from a file (from the line starting with `prefix`), or 0. */
static uint64_t read_u64_file(const char *path, const char *prefix)
{
	char line[256];
	uint64_t v = 0;
	FILE *f = fopen(path, "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (prefix && strncmp(line, prefix, strlen(prefix)) != 0)
			continue;
		v = strtoull(line + (prefix ? strlen(prefix) : 0), NULL, 10);
		break;
	}
	fclose(f);
	return v;
}

uint64_t config_usable_memory(void)
{
	char path[PATH_MAX];
	uint64_t total = read_u64_file("/proc/meminfo", "MemTotal:") * 1024, limit;

	/* memory.max reads "max" (0 here) when there is no limit. */
	if (cgroup_file("memory.max", path, sizeof(path)) == 0) {
		limit = read_u64_file(path, NULL);
		if (limit > 0 && (total == 0 || limit < total))
			total = limit;
	}
	return total ? total : 1ull << 30;
}

void config_resolve_memory(struct config *c)
{
	if (c->memory_budget == 0)
		c->memory_budget = config_usable_memory() / 2;
	if (!c->cache_bytes_set)
		c->cache_bytes = c->memory_budget / 2;
	if (c->cache_bytes > c->memory_budget)
		c->cache_bytes = c->memory_budget;
}

uint32_t config_usable_cpus(void)
{
	cpu_set_t set;
	uint32_t n = 1, quota;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = (uint32_t)CPU_COUNT(&set);
	quota = cgroup_cpu_limit();
	if (quota > 0 && quota < n)
		n = quota;
	return n > 0 ? n : 1;
}
