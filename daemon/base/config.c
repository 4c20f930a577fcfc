/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config.h"
#include "paths.h" /* generated: the layers' paths (Makefile) */

void config_defaults(struct config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->socket_path, sizeof(c->socket_path), "%s", "/run/stoker/stoker.sock");
	c->socket_mode = 0660;
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
	c->stop_timeout_ms = 5000;
	c->stopped_lease_ms = 30000;
	c->idle_exit_s = 60;
	c->metrics_interval_ms = 15000;
	c->log_level = LOG_LVL_INFO;
	c->fetch_max_inflight = 64;
	c->fetch_connect_timeout_ms = 5000;
	c->fetch_stall_timeout_ms = 10000;
	c->fetch_retries = 5;
	c->fetch_backoff_ms = 200;
	c->remote_listing_ttl_s = 600;
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
	case '\0': break;
	case 'K':
	case 'k':
		shift = 10;
		end++;
		break;
	case 'M':
	case 'm':
		shift = 20;
		end++;
		break;
	case 'G':
	case 'g':
		shift = 30;
		end++;
		break;
	case 'T':
	case 't':
		shift = 40;
		end++;
		break;
	default: return -EINVAL;
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
	enum { KEY_U32, KEY_U64, KEY_SIZE, KEY_STR, KEY_MODE, KEY_LOG_LEVEL, KEY_CACHE_BYTES, KEY_CACHE_POLICY } type;
	size_t offset;
	uint64_t lo, hi; /* numbers: the range; KEY_STR: the field's size */
	bool live;       /* a change applies while running (service.c) */
};

#define LIVE true
#define RESTART false
#define U32(n, lo, hi, live)                                          \
	{                                                             \
#n, KEY_U32, offsetof(struct config, n), lo, hi, live \
	}
#define U64(n, lo, hi, live)                                          \
	{                                                             \
#n, KEY_U64, offsetof(struct config, n), lo, hi, live \
	}
#define SIZE(n, lo, hi, live)                                          \
	{                                                              \
#n, KEY_SIZE, offsetof(struct config, n), lo, hi, live \
	}
#define STR(key, n, live)                                                                          \
	{                                                                                          \
		key, KEY_STR, offsetof(struct config, n), 0, sizeof(((struct config *)0)->n), live \
	}
static const struct config_key config_keys[] = {
	STR("socket", socket_path, RESTART),
	{"socket_mode", KEY_MODE, offsetof(struct config, socket_mode), 0, 0777, RESTART},
	STR("socket_group", socket_group, RESTART),
	STR("admin_group", admin_group, LIVE),
	U32(workers, 0, 4096, LIVE), /* POOL_MAX_WORKERS */
	U32(prefetch, 1, 1024, LIVE),
	U32(max_prefetch, 1, 1024, LIVE),
	U32(max_batch_size, 1, 1u << 20, LIVE),
	U32(max_image_size, 8, 16384, LIVE),
	SIZE(max_ring_bytes, 1u << 20, 1ull << 44, LIVE),
	U32(max_clients, 1, 1u << 20, LIVE),
	SIZE(max_frame_bytes, 1024, 16u << 20, LIVE),
	U64(max_image_pixels, 1, 1ull << 34, RESTART),
	SIZE(max_file_bytes, 1024, 1ull << 34, RESTART),
	U32(max_scans, 1, 100000, RESTART),
	U32(replace_attempts, 1, 1024, RESTART),
	SIZE(memory_budget, 0, 1ull << 50, LIVE),
	SIZE(gpu_memory_budget, 0, 1ull << 50, LIVE),
	{"cache_bytes", KEY_CACHE_BYTES, offsetof(struct config, cache_bytes), 0, 1ull << 50, LIVE},
	{"cache_policy", KEY_CACHE_POLICY, offsetof(struct config, cache_policy), 0, 0, RESTART},
	U32(cache_decoded_side, 0, 16384, RESTART),
	U32(stop_timeout_ms, 0, 3600000, LIVE),
	U32(stopped_lease_ms, 0, 86400000, LIVE),
	U32(user_mode, 0, 1, RESTART),
	U32(idle_exit_s, 0, 31u << 20, LIVE),
	STR("metrics_textfile", metrics_textfile, LIVE),
	U32(metrics_interval_ms, 100, 3600000, LIVE),
	STR("metrics_listen", metrics_listen, RESTART),
	STR("shard_index_dir", shard_index_dir, RESTART),
	{"log_level", KEY_LOG_LEVEL, offsetof(struct config, log_level), 0, 0, LIVE},
	U32(fetch_max_inflight, 1, 4096, RESTART),
	U32(fetch_connect_timeout_ms, 100, 600000, RESTART),
	U32(fetch_stall_timeout_ms, 1000, 3600000, RESTART),
	U32(fetch_retries, 0, 100, RESTART),
	U32(fetch_backoff_ms, 1, 60000, RESTART),
	U32(remote_listing_ttl_s, 0, 31u << 20, LIVE),
	STR("s3_endpoint", s3_endpoint, LIVE),
	STR("s3_region", s3_region, LIVE),
	STR("s3_profile", s3_profile, LIVE),
	STR("s3_credentials_file", s3_credentials_file, LIVE),
	STR("shared_remote_prefixes", shared_remote_prefixes, LIVE),
};
#define NKEYS (sizeof(config_keys) / sizeof(config_keys[0]))
_Static_assert(NKEYS <= CONFIG_MAX_KEYS, "raise CONFIG_MAX_KEYS");

size_t config_key_count(void)
{
	return NKEYS;
}

const char *config_key_name(size_t i)
{
	return i < NKEYS ? config_keys[i].name : NULL;
}

int config_key_index(const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(config_keys[i].name, name) == 0)
			return (int)i;
	return -ENOENT;
}

bool config_key_live(size_t i)
{
	return i < NKEYS && config_keys[i].live;
}

/* Sizes as the largest exact binary unit: 4G, 64K, 89478485. */
static void format_size(uint64_t v, char *buf, size_t size)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (v && v % 1024 == 0 && u < 3) {
		v /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, size, "%llu", (unsigned long long)v);
	else
		snprintf(buf, size, "%llu%c", (unsigned long long)v, units[u]);
}

void config_format(const struct config *c, size_t i, char *buf, size_t size)
{
	const struct config_key *k;
	const char *field;
	uint64_t v64;
	uint32_t v32;

	if (i >= NKEYS || size == 0) {
		if (size)
			buf[0] = '\0';
		return;
	}
	k = &config_keys[i];
	field = (const char *)c + k->offset;
	switch (k->type) {
	case KEY_U32:
		memcpy(&v32, field, sizeof(v32));
		snprintf(buf, size, "%u", v32);
		break;
	case KEY_U64:
		memcpy(&v64, field, sizeof(v64));
		snprintf(buf, size, "%llu", (unsigned long long)v64);
		break;
	case KEY_SIZE:
		if (strcmp(k->name, "max_frame_bytes") == 0) {
			memcpy(&v32, field, sizeof(v32));
			v64 = v32;
		} else {
			memcpy(&v64, field, sizeof(v64));
		}
		format_size(v64, buf, size);
		break;
	case KEY_STR: snprintf(buf, size, "%s", field); break;
	case KEY_MODE: snprintf(buf, size, "%04o", c->socket_mode); break;
	case KEY_LOG_LEVEL: snprintf(buf, size, "%s", log_level_name(c->log_level)); break;
	case KEY_CACHE_BYTES:
		if (c->cache_bytes_set)
			format_size(c->cache_bytes, buf, size);
		else
			snprintf(buf, size, "auto");
		break;
	case KEY_CACHE_POLICY: snprintf(buf, size, "%s", c->cache_policy ? "lru" : "minio"); break;
	}
}

int config_set(struct config *c, const char *key, const char *value)
{
	for (size_t i = 0; i < NKEYS; i++) {
		const struct config_key *k = &config_keys[i];
		char *field = (char *)c + k->offset;
		unsigned long mode;
		uint64_t v64;
		uint32_t v32;
		char *end;
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
		case KEY_SIZE:
			r = parse_size(value, k->hi, &v64);
			if (r == 0 && v64 < k->lo)
				r = -ERANGE;
			if (r < 0)
				return -EINVAL;
			if (strcmp(k->name, "max_frame_bytes") == 0) {
				v32 = (uint32_t)v64;
				memcpy(field, &v32, sizeof(v32));
			} else {
				memcpy(field, &v64, sizeof(v64));
			}
			return 0;
		case KEY_STR:
			/* Empty means "none" for every string key but the socket. */
			if (strlen(value) >= k->hi || (!*value && strcmp(k->name, "socket") == 0) ||
			    strpbrk(value, "\n\r"))
				return -EINVAL;
			memcpy(field, value, strlen(value) + 1);
			return 0;
		case KEY_MODE:
			errno = 0;
			mode = strtoul(value, &end, 8);
			if (!*value || *end || errno || mode > k->hi)
				return -EINVAL;
			c->socket_mode = (uint32_t)mode;
			return 0;
		case KEY_LOG_LEVEL: return log_level_from_string(value, &c->log_level);
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

void config_origins_init(struct config_origins *o)
{
	for (size_t i = 0; i < NKEYS; i++)
		snprintf(o->key[i], sizeof(o->key[i]), "default");
}

int config_set_from(struct config *c, struct config_origins *o, const char *key, const char *value, const char *origin)
{
	int r = config_set(c, key, value);

	if (r == 0 && o)
		snprintf(o->key[config_key_index(key)], CONFIG_ORIGIN_MAX, "%s", origin);
	return r;
}

struct config_load_state {
	struct config *c;
	struct config_origins *o;
	const char *path;
	int error;
	char bad_key[CONFIG_NAME_MAX];
};

static int config_ini_handler(void *user, const char *section, const char *name, const char *value)
{
	struct config_load_state *st = user;
	int r;

	snprintf(st->bad_key, sizeof(st->bad_key), "%s", name);
	if (strcasecmp(section, "stokerd") != 0) {
		st->error = -ENOENT;
		return 0;
	}
	r = config_set_from(st->c, st->o, name, value, st->path);
	if (r < 0) {
		st->error = r;
		return 0;
	}
	return 1;
}

/* -errno if unreadable; a bad line: its number in *bad_line, the key in st. */
static int load_file(struct config_load_state *st, int *bad_line)
{
	FILE *f;
	int line;

	f = fopen(st->path, "re");
	if (!f)
		return -errno;
	line = ini_parse_file(f, config_ini_handler, st);
	fclose(f);
	if (line != 0) {
		*bad_line = line;
		return st->error < 0 ? st->error : -EINVAL;
	}
	return 0;
}

int config_load(struct config *c, const char *path, int *bad_line)
{
	struct config_load_state st = {.c = c, .path = path};

	return load_file(&st, bad_line);
}

/* One layer; a missing file is skipped unless `required`. */
static int load_layer(struct config *c, struct config_origins *o, struct config_files *files, const char *path,
		      bool required, char *errbuf, size_t errlen)
{
	struct config_load_state st = {.c = c, .o = o, .path = path};
	int line = 0, r;

	r = load_file(&st, &line);
	if (r == -ENOENT && !required && line == 0)
		return 0;
	if (r < 0) {
		if (line > 0)
			snprintf(errbuf, errlen, "%s:%d: %s '%s'", path, line,
				 r == -ENOENT ? "unknown setting (or not in [stokerd])" : "bad value for", st.bad_key);
		else
			snprintf(errbuf, errlen, "%s: %s", path, strerror(-r));
		return r;
	}
	if (files) {
		if (files->n == CONFIG_MAX_FILES) {
			snprintf(errbuf, errlen, "%s: more than %d configuration files", path, CONFIG_MAX_FILES);
			return -E2BIG;
		}
		snprintf(files->path[files->n++], CONFIG_ORIGIN_MAX, "%s", path);
	}
	return 0;
}

static int dropin_filter(const struct dirent *e)
{
	size_t n = strlen(e->d_name);

	return e->d_name[0] != '.' && n > 5 && strcmp(e->d_name + n - 5, ".conf") == 0;
}

static int dropin_compare(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int config_load_layers(struct config *c, struct config_origins *o, struct config_files *files, const char *root,
		       const char *file, char *errbuf, size_t errlen)
{
	static const char *const layers[] = {STOKER_VENDOR_CONFIG, STOKER_ADMIN_CONFIG_DIR "/stoker.conf"};
	char path[PATH_MAX], dir[PATH_MAX];
	struct dirent **names = NULL;
	int n = 0, r = 0;

	if (files)
		files->n = 0;
	if (file)
		return load_layer(c, o, files, file, true, errbuf, errlen);
	if (!root || strcmp(root, "/") == 0)
		root = "";
	for (size_t i = 0; i < sizeof(layers) / sizeof(layers[0]); i++) {
		snprintf(path, sizeof(path), "%s%s", root, layers[i]);
		r = load_layer(c, o, files, path, false, errbuf, errlen);
		if (r < 0)
			return r;
	}
	snprintf(dir, sizeof(dir), "%s%s/stoker.conf.d", root, STOKER_ADMIN_CONFIG_DIR);
	n = scandir(dir, &names, dropin_filter, dropin_compare);
	if (n < 0) {
		r = errno == ENOENT || errno == ENOTDIR ? 0 : -errno;
		if (r < 0)
			snprintf(errbuf, errlen, "%s: %s", dir, strerror(-r));
		return r;
	}
	for (int i = 0; i < n; i++) {
		struct stat st;

		if (snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name) >= (int)sizeof(path) && r == 0) {
			snprintf(errbuf, errlen, "%s: a drop-in's name is too long", dir);
			r = -ENAMETOOLONG;
		}
		/* Drop-ins may be links; directories named *.conf are not. */
		if (r == 0 && stat(path, &st) == 0 && S_ISREG(st.st_mode))
			r = load_layer(c, o, files, path, true, errbuf, errlen);
		free(names[i]);
	}
	free(names);
	return r;
}

int config_group_id(const char *name, uint32_t *gid)
{
	struct group gr, *res = NULL;
	char buf[16384];

	if (getgrnam_r(name, &gr, buf, sizeof(buf), &res) != 0 || !res)
		return -ENOENT;
	*gid = (uint32_t)res->gr_gid;
	return 0;
}

/* "127.0.0.1:9477" or "[::1]:9477": a loopback address and a port. */
static int check_listen_address(const char *s, char *errbuf, size_t errlen)
{
	char host[64];
	const char *colon;
	unsigned char addr[16];
	unsigned long port;
	char *end;

	colon = strrchr(s, ':');
	if (!colon || colon == s || (size_t)(colon - s) >= sizeof(host))
		goto bad;
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	errno = 0;
	port = strtoul(colon + 1, &end, 10);
	if (!colon[1] || *end || errno || port == 0 || port > 65535)
		goto bad;
	if (host[0] == '[') {
		size_t n = strlen(host);

		if (n < 3 || host[n - 1] != ']')
			goto bad;
		host[n - 1] = '\0';
		if (inet_pton(AF_INET6, host + 1, addr) != 1)
			goto bad;
		if (memcmp(addr, (const unsigned char[16]){[15] = 1}, 16) != 0)
			goto not_loopback;
		return 0;
	}
	if (inet_pton(AF_INET, host, addr) != 1)
		goto bad;
	if (addr[0] != 127)
		goto not_loopback;
	return 0;
bad:
	snprintf(errbuf, errlen, "metrics_listen '%s': want ADDRESS:PORT, e.g. 127.0.0.1:9477 or [::1]:9477", s);
	return -EINVAL;
not_loopback:
	snprintf(errbuf, errlen, "metrics_listen '%s': only a loopback address (127.0.0.0/8, ::1) is allowed", s);
	return -EINVAL;
}

int config_load_all(struct config *c, struct config_origins *o, struct config_files *files, const char *root,
		    const char *file, const struct config_overrides *ov, char *errbuf, size_t errlen)
{
	int r;

	config_defaults(c);
	if (o)
		config_origins_init(o);
	r = config_load_layers(c, o, files, root, file, errbuf, errlen);
	if (r < 0)
		return r;
	for (size_t i = 0; ov && i < config_key_count(); i++) {
		if (ov->cmdline && ov->cmdline[i]) {
			r = config_set_from(c, o, config_key_name(i), ov->cmdline[i], CONFIG_ORIGIN_CMDLINE);
			if (r < 0) {
				snprintf(errbuf, errlen, "bad value '%s' for %s on the command line", ov->cmdline[i],
					 config_key_name(i));
				return r;
			}
		}
		if (ov->runtime && ov->runtime[i] &&
		    config_set_from(c, o, config_key_name(i), ov->runtime[i], CONFIG_ORIGIN_RUNTIME) < 0)
			return -EINVAL; /* it was checked when set */
	}
	return 0;
}

int config_validate(const struct config *c, char *errbuf, size_t errlen)
{
	uint32_t gid;

	if (c->prefetch > c->max_prefetch) {
		snprintf(errbuf, errlen, "prefetch %u is over max_prefetch %u", c->prefetch, c->max_prefetch);
		return -EINVAL;
	}
	if (c->socket_group[0] && config_group_id(c->socket_group, &gid) < 0) {
		snprintf(errbuf, errlen, "socket_group '%s': no such group", c->socket_group);
		return -EINVAL;
	}
	if (c->admin_group[0] && config_group_id(c->admin_group, &gid) < 0) {
		snprintf(errbuf, errlen, "admin_group '%s': no such group", c->admin_group);
		return -EINVAL;
	}
	if (c->shard_index_dir[0] && c->shard_index_dir[0] != '/') {
		snprintf(errbuf, errlen, "shard_index_dir '%s' must be an absolute path", c->shard_index_dir);
		return -EINVAL;
	}
	if (c->metrics_textfile[0] && c->metrics_textfile[0] != '/') {
		snprintf(errbuf, errlen, "metrics_textfile '%s' must be an absolute path", c->metrics_textfile);
		return -EINVAL;
	}
	if (c->metrics_listen[0])
		return check_listen_address(c->metrics_listen, errbuf, errlen);
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
