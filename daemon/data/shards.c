/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errtext.h"
#include "grow.h"
#include "shards.h"
#include "tar.h"
#include "text.h"

/* A label member larger than this is not a label. */
#define SHARDS_MAX_LABEL_BYTES (64u << 10)

static char index_dir[PATH_MAX];

void shards_set_index_dir(const char *dir)
{
	snprintf(index_dir, sizeof(index_dir), "%s", dir ? dir : "");
}

static bool has_suffix_ci(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

/* ---- WebDataset's names ---- */

/*
 * WebDataset's base_plus_ext(): the regex ^((?:.* / |)[^.]+)[.]([^/]*)$
 * (without the spaces) on the name. The
 * extension has no '/', so its dot is in the last component; the key is
 * some X + Y with X empty or ending in '/', Y non-empty and dot-free.
 */
bool shards_key_split(const char *name, size_t *key_len, const char **ext)
{
	const char *slash = strrchr(name, '/');
	const char *comp = slash ? slash + 1 : name;
	const char *dot = strchr(comp, '.');
	size_t klen;

	if (!dot)
		return false;
	if (dot == comp) {
		/* ".x" after a '/': Y must end at that '/' and start after the
		 * key's last dot, just after an earlier '/' (or at the start). */
		const char *last_dot = NULL;
		bool ok = false;

		klen = (size_t)(comp - name);
		for (size_t i = 0; i < klen; i++)
			if (name[i] == '.')
				last_dot = name + i;
		if (!last_dot)
			ok = klen > 0;
		for (const char *p = last_dot ? last_dot + 1 : name; !ok && p + 1 < name + klen; p++)
			ok = *p == '/';
		if (!ok)
			return false;
	} else {
		klen = (size_t)(dot - name);
	}
	*key_len = klen;
	*ext = dot + 1;
	return true;
}

/* WebDataset skips "__name__" members (its metadata). */
static bool is_meta(const char *name)
{
	const char *end;

	if (strncmp(name, "__", 2) != 0)
		return false;
	end = strchr(name + 2, '/');
	if (!end)
		end = name + strlen(name);
	return end - name >= 4 && end[-1] == '_' && end[-2] == '_';
}

/* ---- brace expansion (braceexpand's rules) ---- */

static bool parse_int(const char *s, size_t len, long long *out)
{
	char buf[32], *end;

	if (len == 0 || len >= sizeof(buf))
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (!((buf[0] >= '0' && buf[0] <= '9') || (buf[0] == '-' && len > 1)))
		return false;
	errno = 0;
	*out = strtoll(buf, &end, 10);
	return !errno && *end == '\0' && *out > -(1ll << 53) && *out < (1ll << 53);
}

static bool zero_padded(const char *s, size_t len)
{
	if (len == 1 && s[0] == '0')
		return false;
	if (len == 2 && s[0] == '-' && s[1] == '0')
		return false;
	return s[0] == '0' || (len > 1 && s[0] == '-' && s[1] == '0');
}

static int push_joined(struct strvec *out, uint64_t max, const char *a, size_t alen, const char *b, size_t blen,
		       const char *c)
{
	char buf[PATH_MAX];

	if (out->n >= max)
		return -E2BIG;
	if (alen + blen + strlen(c) >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, a, alen);
	memcpy(buf + alen, b, blen);
	strcpy(buf + alen + blen, c);
	return strvec_push(out, buf);
}

static int expand(const char *pat, uint64_t max, unsigned depth, struct strvec *out);

/* Expand pre + each alternative + post. */
static int expand_alt(const char *pat, size_t pre, const char *alt, size_t altlen, const char *post, uint64_t max,
		      unsigned depth, struct strvec *out)
{
	struct strvec one = {0};
	int r = push_joined(&one, 1, pat, pre, alt, altlen, post);

	if (r == 0)
		r = expand(one.v[0], max, depth + 1, out);
	strvec_free(&one);
	return r;
}

/* Is "{inner}" a range a..b or a..b..step? Expands it if so (1), else 0. */
static int expand_range(const char *pat, size_t pre, const char *inner, size_t len, const char *post, uint64_t max,
			unsigned depth, struct strvec *out)
{
	const char *d1 = NULL, *d2 = NULL;
	long long a, b, step = 1;
	int width = 0, r;

	for (size_t i = 0; i + 1 < len; i++)
		if (inner[i] == '.' && inner[i + 1] == '.') {
			if (!d1)
				d1 = inner + i;
			else if (!d2 && inner + i > d1 + 1)
				d2 = inner + i;
		}
	if (!d1)
		return 0;
	if (!parse_int(inner, (size_t)(d1 - inner), &a) ||
	    !parse_int(d1 + 2, (size_t)((d2 ? d2 : inner + len) - d1 - 2), &b) ||
	    (d2 && !parse_int(d2 + 2, (size_t)(inner + len - d2 - 2), &step)))
		return 0;
	if (zero_padded(inner, (size_t)(d1 - inner)) || zero_padded(d1 + 2, (size_t)((d2 ? d2 : inner + len) - d1 - 2)))
		width = (int)((size_t)(d1 - inner) > (size_t)((d2 ? d2 : inner + len) - d1 - 2)
				      ? (size_t)(d1 - inner)
				      : (size_t)((d2 ? d2 : inner + len) - d1 - 2));
	step = step < 0 ? -step : step;
	if (step == 0)
		step = 1;
	if ((uint64_t)((a < b ? b - a : a - b) / step) >= max)
		return -E2BIG;
	for (long long v = a; a <= b ? v <= b : v >= b; v += a <= b ? step : -step) {
		char num[40];
		int n = snprintf(num, sizeof(num), "%0*lld", width, v);

		r = expand_alt(pat, pre, num, (size_t)n, post, max, depth, out);
		if (r < 0)
			return r;
	}
	return 1;
}

static int expand(const char *pat, uint64_t max, unsigned depth, struct strvec *out)
{
	if (depth > 64)
		return -EINVAL;
	for (const char *open = strchr(pat, '{'); open; open = strchr(open + 1, '{')) {
		const char *p, *close = NULL;
		int level = 0, r;
		bool comma = false;

		for (p = open; *p; p++) {
			if (*p == '{')
				level++;
			else if (*p == '}' && --level == 0) {
				close = p;
				break;
			} else if (*p == ',' && level == 1)
				comma = true;
		}
		if (!close)
			break; /* unbalanced: literal, as braceexpand leaves it */
		if (comma) {
			const char *alt = open + 1;

			level = 0;
			for (p = open + 1; p <= close; p++) {
				if (*p == '{')
					level++;
				else if (*p == '}' && level > 0)
					level--;
				else if ((*p == ',' && level == 0) || p == close) {
					r = expand_alt(pat, (size_t)(open - pat), alt, (size_t)(p - alt), close + 1,
						       max, depth, out);
					if (r < 0)
						return r;
					alt = p + 1;
				}
			}
			return 0;
		}
		r = expand_range(pat, (size_t)(open - pat), open + 1, (size_t)(close - open - 1), close + 1, max, depth,
				 out);
		if (r != 0)
			return r < 0 ? r : 0;
		/* "{x}" without a comma or range stays literal; look further. */
	}
	if (out->n >= max)
		return -E2BIG;
	return strvec_push(out, pat);
}

int shards_expand(const char *pattern, uint64_t max, struct strvec *out)
{
	return expand(pattern, max, 0, out);
}

/* ---- the narrow interface to shard bytes (local files) ---- */

static int64_t stat_stamp(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

int shard_stat(const char *loc, uint64_t *size, int64_t *stamp)
{
	struct stat st;

	if (stat(loc, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	*size = (uint64_t)st.st_size;
	*stamp = stat_stamp(&st);
	return 0;
}

/* len bytes at off, short only at the end of the file, or -errno. */
static int64_t pread_full(int fd, uint64_t off, void *buf, size_t len)
{
	size_t done = 0;

	while (done < len) {
		ssize_t n = pread(fd, (uint8_t *)buf + done, len - done, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (int64_t)done;
}

/* A read of len bytes that returned n: 0 when whole, -EIO when short
 * (the shard is shorter than indexed), else n's -errno. */
static int read_whole(int64_t n, size_t len)
{
	return n < 0 ? (int)n : (size_t)n == len ? 0 : -EIO;
}

static int pread_exact(int fd, uint64_t off, void *buf, size_t len)
{
	return read_whole(pread_full(fd, off, buf, len), len);
}

/* A remote shard read while it is opened (indexed, its labels read):
 * headers and labels are small and far apart, so each request reads ahead
 * SOURCE_CHUNK bytes: the shard is read once, in order, rather than one
 * round trip per member. */
#define SOURCE_CHUNK (4u << 20)

struct source_reader {
	const struct shard *sh;
	uint8_t *chunk;
	uint64_t chunk_off;
	size_t chunk_len;
};

static void readahead_free(struct shard *sh)
{
	if (sh->readahead) {
		free(sh->readahead->chunk);
		free(sh->readahead);
		sh->readahead = NULL;
	}
}

static int64_t source_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	struct source_reader *r = ctx;
	size_t done = 0;

	while (done < len) {
		uint64_t at = off + done;
		int64_t n;

		if (at >= r->chunk_off && at < r->chunk_off + r->chunk_len) {
			size_t take = (size_t)(r->chunk_off + r->chunk_len - at);

			if (take > len - done)
				take = len - done;
			memcpy((uint8_t *)buf + done, r->chunk + (at - r->chunk_off), take);
			done += take;
			continue;
		}
		if (at >= r->sh->size)
			break;
		if (!r->chunk && !(r->chunk = malloc(SOURCE_CHUNK)))
			return -ENOMEM;
		n = r->sh->src->read(r->sh->src->ctx, r->sh->loc, at, r->chunk,
				     (size_t)(r->sh->size - at < SOURCE_CHUNK ? r->sh->size - at : SOURCE_CHUNK));
		if (n < 0)
			return n;
		if (n == 0)
			break;
		r->chunk_off = at;
		r->chunk_len = (size_t)n;
	}
	return (int64_t)done;
}

int shard_read(const struct shard *sh, uint64_t off, void *buf, size_t len)
{
	struct stat st;
	int fd, r;

	if (sh->src) {
		/* While opening, labels come from the bytes read ahead. */
		int64_t n = sh->readahead ? source_read(sh->readahead, off, buf, len)
					  : sh->src->read(sh->src->ctx, sh->loc, off, buf, len);

		return read_whole(n, len);
	}

	fd = open(sh->loc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	/* Another file now, or rewritten: the index no longer describes it. */
	if ((uint64_t)st.st_size != sh->size || stat_stamp(&st) != sh->stamp) {
		r = -ESTALE;
		goto out;
	}
	r = pread_exact(fd, off, buf, len);
out:
	close(fd);
	return r;
}

/* ---- member indexes, and the index directory ---- */

struct file_reader {
	int fd;
};

static int64_t file_read(void *ctx, uint64_t off, void *buf, size_t len)
{
	return pread_full(((struct file_reader *)ctx)->fd, off, buf, len);
}

#define INDEX_MAGIC "STKTAR1\n"

struct index_header {
	char magic[8];
	uint64_t shard_size;
	int64_t stamp;
	uint64_t ino, dev;
	uint64_t members;
	uint64_t names_len;
	uint64_t path_len;
};

static uint64_t fnv1a(const char *s)
{
	uint64_t h = 1469598103934665603ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static bool index_path(const char *loc, char *out, size_t len)
{
	const char *base = strrchr(loc, '/');

	if (!index_dir[0])
		return false;
	base = base ? base + 1 : loc;
	return (size_t)snprintf(out, len, "%s/%.64s.%016llx.idx", index_dir, base, (unsigned long long)fnv1a(loc)) <
	       len;
}

static int read_all(int fd, void *buf, size_t len)
{
	return pread_exact(fd, 0, buf, len);
}

/* The saved index of this very shard (size, stamp, inode), checked
 * throughout; anything else is -ENOENT and the caller rebuilds it. */
static int index_load(const char *loc, const struct stat *st, struct tar_index *out)
{
	struct index_header h;
	struct tar_index t = {0};
	struct tar_member *m = NULL;
	char path[PATH_MAX + 64], *names = NULL, *saved = NULL;
	struct stat ist;
	uint64_t need;
	int fd, r = -ENOENT;

	if (!index_path(loc, path, sizeof(path)))
		return -ENOENT;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &ist) < 0 || !S_ISREG(ist.st_mode) || read_all(fd, &h, sizeof(h)) < 0)
		goto out;
	if (memcmp(h.magic, INDEX_MAGIC, 8) != 0 || h.shard_size != (uint64_t)st->st_size ||
	    h.stamp != stat_stamp(st) || h.ino != (uint64_t)st->st_ino || h.dev != (uint64_t)st->st_dev ||
	    h.path_len != strlen(loc) || h.members > SHARDS_MAX_MEMBERS || h.names_len > (uint64_t)ist.st_size)
		goto out;
	need = sizeof(h) + h.path_len + h.members * sizeof(*m) + h.names_len;
	if (need != (uint64_t)ist.st_size)
		goto out;
	saved = malloc(h.path_len + 1);
	m = malloc(h.members ? h.members * sizeof(*m) : 1);
	names = malloc(h.names_len ? h.names_len : 1);
	if (!saved || !m || !names) {
		r = -ENOMEM;
		goto out;
	}
	if (pread_exact(fd, sizeof(h), saved, h.path_len) < 0 || memcmp(saved, loc, h.path_len) != 0 ||
	    pread_exact(fd, sizeof(h) + h.path_len, m, h.members * sizeof(*m)) < 0 ||
	    pread_exact(fd, sizeof(h) + h.path_len + h.members * sizeof(*m), names, h.names_len) < 0)
		goto out;
	if (h.names_len && names[h.names_len - 1] != '\0')
		goto out;
	for (uint64_t i = 0; i < h.members; i++) {
		if (m[i].name_off >= h.names_len || m[i].offset > h.shard_size ||
		    m[i].size > h.shard_size - m[i].offset)
			goto out;
	}
	t.v = m;
	t.n = t.cap = h.members;
	t.names = names;
	t.names_len = t.names_cap = h.names_len;
	m = NULL;
	names = NULL;
	*out = t;
	r = 0;
out:
	close(fd);
	free(saved);
	free(m);
	free(names);
	return r;
}

/* Save the index beside the others (atomically: a temporary, renamed).
 * Failing is not an error: the index is rebuilt next time. */
static void index_save(const char *loc, const struct stat *st, const struct tar_index *t)
{
	struct index_header h = {
		.shard_size = (uint64_t)st->st_size,
		.stamp = stat_stamp(st),
		.ino = (uint64_t)st->st_ino,
		.dev = (uint64_t)st->st_dev,
		.members = t->n,
		.names_len = t->names_len,
		.path_len = strlen(loc),
	};
	char path[PATH_MAX + 64], tmp[PATH_MAX + 80];
	FILE *f;
	int fd;

	if (!index_path(loc, path, sizeof(path)) ||
	    (size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", path) >= sizeof(tmp))
		return;
	memcpy(h.magic, INDEX_MAGIC, 8);
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return;
	f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		unlink(tmp);
		return;
	}
	if (fwrite(&h, sizeof(h), 1, f) != 1 || fwrite(loc, 1, h.path_len, f) != h.path_len ||
	    (t->n && fwrite(t->v, sizeof(*t->v), t->n, f) != t->n) ||
	    (t->names_len && fwrite(t->names, 1, t->names_len, f) != t->names_len) || fclose(f) != 0) {
		unlink(tmp);
		return;
	}
	if (rename(tmp, path) < 0)
		unlink(tmp);
}

/* Shard `sh`'s member index, read through `read`: the saved one if it
 * still fits `st` (the file's stat, or what stands for it), else built
 * (and saved). */
static int index_load_or_build(struct shard *sh, const struct stat *st, tar_read_fn read, void *ctx,
			       struct tar_index *out, bool *built, char *errbuf, size_t errlen)
{
	uint64_t err_off = 0;
	char why[128];
	int r;

	*built = false;
	r = index_load(sh->loc, st, out);
	if (r != -ENOENT)
		return r;
	r = tar_index_build(read, ctx, sh->size, SHARDS_MAX_MEMBERS, out, &err_off, why, sizeof(why));
	if (r < 0) {
		set_err(errbuf, errlen, "shard %s: offset %llu: %s", sh->loc, (unsigned long long)err_off, why);
		return r;
	}
	*built = true;
	index_save(sh->loc, st, out);
	return 0;
}

/* A shard read through its source: its size and stamp stand for the
 * file's stat in the saved index's checks. */
static int source_index(struct shard *sh, struct tar_index *out, bool *built, char *errbuf, size_t errlen)
{
	struct source_reader *sr;
	struct stat st = {0};
	int r;

	r = sh->src->stat(sh->src->ctx, sh->loc, &sh->size, &sh->stamp);
	if (r < 0) {
		set_err(errbuf, errlen, "shard %s: %s", sh->loc, strerror(-r));
		return r;
	}
	st.st_size = (off_t)sh->size;
	st.st_mtim.tv_sec = sh->stamp / 1000000000;
	st.st_mtim.tv_nsec = sh->stamp % 1000000000;
	sr = calloc(1, sizeof(*sr));
	if (!sr)
		return -ENOMEM;
	sr->sh = sh;
	sh->readahead = sr; /* until the shard's labels are read (open_locs) */
	return index_load_or_build(sh, &st, source_read, sr, out, built, errbuf, errlen);
}

/* Fills sh's size and stamp from the file indexed. */
static int shard_index(struct shard *sh, struct tar_index *out, bool *built, char *errbuf, size_t errlen)
{
	struct file_reader fr;
	struct stat st;
	int r;

	if (sh->src)
		return source_index(sh, out, built, errbuf, errlen);
	fr.fd = open(sh->loc, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fr.fd < 0) {
		r = -errno;
		set_err(errbuf, errlen, "shard %s: %s", sh->loc, strerror(-r));
		return r;
	}
	if (fstat(fr.fd, &st) < 0) {
		r = -errno;
		set_err(errbuf, errlen, "shard %s: %s", sh->loc, strerror(-r));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		r = -EINVAL;
		set_err(errbuf, errlen, "shard %s: not a regular file", sh->loc);
		goto out;
	}
	sh->size = (uint64_t)st.st_size;
	sh->stamp = stat_stamp(&st);
	r = index_load_or_build(sh, &st, file_read, &fr, out, built, errbuf, errlen);
out:
	close(fr.fd);
	return r;
}

/* ---- which shards ---- */

static bool is_pattern(const char *path)
{
	const char *open = strchr(path, '{');

	return open && strchr(open, '}') && access(path, F_OK) != 0;
}

/* Is entry `name` of d a regular .tar file (following links)? */
static bool is_tar_entry(DIR *d, const char *name)
{
	struct stat st;

	return has_suffix_ci(name, ".tar") && fstatat(dirfd(d), name, &st, 0) == 0 && S_ISREG(st.st_mode);
}

/* A directory with .tar files at its top level? */
static bool dir_has_tars(const char *path)
{
	struct dirent *e;
	bool found = false;
	DIR *d = opendir(path);

	if (!d)
		return false;
	while (!found && (e = readdir(d)))
		found = is_tar_entry(d, e->d_name);
	closedir(d);
	return found;
}

/* A list's line of n bytes, trimmed in place: its entry, or NULL for a
 * blank line or a '#' comment. */
bool shards_list_first_entry(FILE *f, char *buf, size_t len)
{
	char *line = NULL, *entry;
	size_t cap = 0;
	ssize_t n;
	bool found = false;

	/* Only the first lines: a huge list is not read twice for this. */
	for (int i = 0; i < 1000 && !found && (n = getline(&line, &cap, f)) >= 0; i++) {
		entry = text_list_entry(line, (size_t)n);
		if (entry) {
			snprintf(buf, len, "%s", entry);
			found = true;
		}
	}
	free(line);
	return found;
}

/* The first entry of a list file, trimmed, into buf; false if none. */
static bool first_entry(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "re");
	bool found;

	if (!f)
		return false;
	found = shards_list_first_entry(f, buf, len);
	fclose(f);
	return found;
}

/* A pattern's directory before its first brace: its length in path, 0 for
 * none (relative to the working directory). */
static size_t pattern_dir_len(const char *path)
{
	const char *slash = NULL;

	for (const char *p = path; *p && *p != '{'; p++)
		if (*p == '/')
			slash = p;
	return slash ? (size_t)(slash - path) + (slash == path) : 0;
}

bool shards_realpath(const char *path, char real[PATH_MAX])
{
	char dir[PATH_MAX], rdir[PATH_MAX];
	size_t dl;
	const char *rest;

	if (!is_pattern(path))
		return false;
	/* Only the part before the first brace is a directory to resolve:
	 * braces may stand in directory names too (`{a,b}/x-{0..3}.tar`). */
	dl = pattern_dir_len(path);
	rest = path + dl + (dl && path[dl] == '/');
	snprintf(dir, sizeof(dir), "%.*s", dl ? (int)dl : 1, dl ? path : ".");
	/* A directory that does not resolve: realpath() reports it. */
	if (!realpath(dir, rdir))
		return false;
	return (size_t)snprintf(real, PATH_MAX, "%s/%s", strcmp(rdir, "/") ? rdir : "", rest) < PATH_MAX;
}

bool shards_spec(const char *path)
{
	struct stat st;
	char entry[PATH_MAX];

	if (is_pattern(path) || has_suffix_ci(path, ".tar"))
		return true;
	if (stat(path, &st) < 0)
		return false;
	if (S_ISDIR(st.st_mode))
		return dir_has_tars(path);
	if (!S_ISREG(st.st_mode) || has_suffix_ci(path, ".yaml") || has_suffix_ci(path, ".yml"))
		return false;
	return first_entry(path, entry, sizeof(entry)) && has_suffix_ci(entry, ".tar");
}

/* Expand one entry (a path or pattern, relative to dir) onto out. */
static int add_entry(const char *dir, const char *entry, struct strvec *out, char *errbuf, size_t errlen)
{
	char full[PATH_MAX];
	int r;

	/* Absolute: a path, or a URL in a list of remote shards. */
	bool absolute = entry[0] == '/' || strstr(entry, "://");

	if ((size_t)snprintf(full, sizeof(full), "%s%s%s", absolute ? "" : dir, absolute ? "" : "/", entry) >=
	    sizeof(full)) {
		set_err(errbuf, errlen, "%s: path too long", entry);
		return -ENAMETOOLONG;
	}
	r = shards_expand(full, SHARDS_MAX - out->n, out);
	if (r == -E2BIG)
		set_err(errbuf, errlen, "%s: more than %u shards", entry, SHARDS_MAX);
	else if (r < 0)
		set_err(errbuf, errlen, "%s: %s", entry, strerror(-r));
	return r;
}

static int list_dir_tars(const char *dir, struct strvec *out, char *errbuf, size_t errlen)
{
	struct strvec names = {0};
	struct dirent *e;
	DIR *d = opendir(dir);
	int r = 0;

	if (!d) {
		r = -errno;
		set_err(errbuf, errlen, "dataset %s: %s", dir, strerror(-r));
		return r;
	}
	while (r == 0 && (e = readdir(d)))
		if (is_tar_entry(d, e->d_name))
			r = names.n >= SHARDS_MAX ? -E2BIG : strvec_push(&names, e->d_name);
	closedir(d);
	strvec_sort(&names);
	for (size_t i = 0; r == 0 && i < names.n; i++) {
		char full[PATH_MAX];

		if ((size_t)snprintf(full, sizeof(full), "%s/%s", dir, names.v[i]) >= sizeof(full))
			r = -ENAMETOOLONG;
		else
			r = strvec_push(out, full);
	}
	if (r < 0)
		set_err(errbuf, errlen, "dataset %s: %s", dir, r == -E2BIG ? "too many shards" : strerror(-r));
	strvec_free(&names);
	return r;
}

int shards_list_read(FILE *f, const char *list, const char *dir, struct strvec *out, char *errbuf, size_t errlen)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	unsigned long lineno = 0;
	int r = 0;

	while (r == 0 && (n = getline(&line, &cap, f)) >= 0) {
		char *entry = text_list_entry(line, (size_t)n);

		lineno++;
		if (!entry)
			continue;
		r = add_entry(dir, entry, out, errbuf, errlen);
		if (r < 0) {
			char msg[512];

			snprintf(msg, sizeof(msg), "%s", errbuf);
			set_err(errbuf, errlen, "%s:%lu: %s", list, lineno, msg);
		}
	}
	free(line);
	return r;
}

static int list_file_shards(const char *list, const char *dir, struct strvec *out, char *errbuf, size_t errlen)
{
	FILE *f = fopen(list, "re");
	int r;

	if (!f) {
		r = -errno;
		set_err(errbuf, errlen, "dataset %s: %s", list, strerror(-r));
		return r;
	}
	r = shards_list_read(f, list, dir, out, errbuf, errlen);
	fclose(f);
	return r;
}

/*
 * The shard paths `path` names, its root (the directory names are shown
 * relative to) and its key (what tells two data sets apart).
 */
static int resolve(const char *path, struct strvec *shards, char *root, char *key, char *errbuf, size_t errlen)
{
	char dir[PATH_MAX], real[PATH_MAX];
	const char *slash = strrchr(path, '/');
	struct stat st;
	int r;

	if (is_pattern(path)) {
		/* The pattern's directory is real; the pattern is its last part. */
		if (!shards_realpath(path, real)) {
			set_err(errbuf, errlen, "dataset %s: its directory does not resolve", path);
			return -ENOENT;
		}
		size_t dl = pattern_dir_len(real);

		snprintf(root, PATH_MAX, "%.*s", (int)dl, real);
		snprintf(key, PATH_MAX * 2, "shards:%s", real);
		return add_entry(root, real + dl + (real[dl] == '/'), shards, errbuf, errlen);
	}
	if (!realpath(path, real) || stat(real, &st) < 0) {
		r = -errno;
		set_err(errbuf, errlen, "dataset %s: %s", path, strerror(-r));
		return r;
	}
	snprintf(key, PATH_MAX * 2, "shards:%s", real);
	if (S_ISDIR(st.st_mode)) {
		snprintf(root, PATH_MAX, "%s", real);
		return list_dir_tars(real, shards, errbuf, errlen);
	}
	snprintf(dir, sizeof(dir), "%s", real);
	slash = strrchr(dir, '/');
	if (slash == dir)
		dir[1] = '\0';
	else if (slash)
		dir[slash - dir] = '\0';
	snprintf(root, PATH_MAX, "%s", dir);
	if (has_suffix_ci(real, ".tar"))
		return strvec_push(shards, real);
	return list_file_shards(real, dir, shards, errbuf, errlen);
}

/* ---- samples ---- */

/* Every extension the loose-file loaders list (torchvision's ppm and pgm,
 * Ultralytics' mpo too), so that a tree's shards hold all of its images. */
static const char *const image_exts[] = {"jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff", "ppm", "pgm", "mpo"};
#define NIMAGE_EXTS (sizeof(image_exts) / sizeof(image_exts[0]))

/* One key's members, as grouped: the image, and the label members. */
struct group {
	const char *key;
	size_t key_len;
	long image, cls, json, txt; /* member indexes, -1: none */
	int image_rank;
	unsigned image_seen; /* bit k: image_exts[k] met */
};

struct samples {
	char *names;
	size_t names_len, names_cap;
	uint64_t *name_off;
	int32_t *labels;
	uint32_t *shard;
	uint64_t *off, *size;
	size_t n, cap;
	struct box_vec boxes;
	uint64_t *box_off;
	size_t box_cap;
};

static void samples_free(struct samples *s)
{
	free(s->names);
	free(s->name_off);
	free(s->labels);
	free(s->shard);
	free(s->off);
	free(s->size);
	free(s->boxes.v);
	free(s->box_off);
}

static int samples_add(struct samples *s, const char *shard_name, const char *member, int32_t label, uint32_t shard,
		       const struct tar_member *m)
{
	size_t len = strlen(shard_name) + 1 + strlen(member) + 1;
	int r = 0;

	if (s->n == s->cap) {
		size_t cap = s->cap ? 2 * s->cap : 1024, c;

		c = s->cap;
		r = grow((void **)&s->name_off, &c, cap, sizeof(*s->name_off));
		c = s->cap;
		r = r ? r : grow((void **)&s->labels, &c, cap, sizeof(*s->labels));
		c = s->cap;
		r = r ? r : grow((void **)&s->shard, &c, cap, sizeof(*s->shard));
		c = s->cap;
		r = r ? r : grow((void **)&s->off, &c, cap, sizeof(*s->off));
		c = s->cap;
		r = r ? r : grow((void **)&s->size, &c, cap, sizeof(*s->size));
		if (r < 0)
			return r;
		s->cap = cap;
	}
	if (s->names_len + len > s->names_cap) {
		size_t cap = s->names_cap ? 2 * s->names_cap : 65536;

		while (cap < s->names_len + len)
			cap *= 2;
		r = grow((void **)&s->names, &s->names_cap, cap, 1);
		if (r < 0)
			return r;
	}
	s->name_off[s->n] = s->names_len;
	s->names_len += (size_t)sprintf(s->names + s->names_len, "%s:%s", shard_name, member) + 1;
	s->labels[s->n] = label;
	s->shard[s->n] = shard;
	s->off[s->n] = m->offset;
	s->size[s->n] = m->size;
	s->n++;
	return 0;
}

/* A small member's text (NUL-terminated) into *buf. */
static int read_member(const struct shard *sh, const struct tar_member *m, uint64_t max, char **buf, size_t *cap)
{
	int r;

	if (m->size > max)
		return -EFBIG;
	r = grow((void **)buf, cap, (size_t)m->size + 1, 1);
	if (r < 0)
		return r;
	r = shard_read(sh, m->offset, *buf, (size_t)m->size);
	if (r < 0)
		return r;
	(*buf)[m->size] = '\0';
	return 0;
}

static bool parse_label(const char *s, const char *end, int32_t *out)
{
	long long v;
	char *e;

	while (s < end && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'))
		s++;
	if (s == end || *s < '0' || *s > '9')
		return false;
	errno = 0;
	v = strtoll(s, &e, 10);
	if (errno || v > INT32_MAX)
		return false;
	while (e < end && (*e == ' ' || *e == '\t' || *e == '\n' || *e == '\r'))
		e++;
	if (e != end)
		return false;
	*out = (int32_t)v;
	return true;
}

/* Skip a JSON string starting at its '"'; the byte after it, or NULL. */
static const char *skip_string(const char *p)
{
	for (p++; *p; p++) {
		if (*p == '\\' && p[1])
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

/* The top-level "label" of a JSON object, an integer. */
static bool json_label(const char *text, int32_t *out)
{
	const char *p = text;
	int depth = 0;

	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p != '{')
		return false;
	while (*p) {
		if (*p == '"') {
			const char *key = p + 1, *after = skip_string(p);

			if (!after)
				return false;
			if (depth == 1 && after - key == 6 && memcmp(key, "label\"", 6) == 0) {
				const char *v = after, *e;

				while (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r')
					v++;
				if (*v == ':') {
					v++;
					for (e = v; *e && *e != ',' && *e != '}'; e++)
						;
					return parse_label(v, e, out);
				}
			}
			p = after;
			continue;
		}
		if (*p == '{' || *p == '[')
			depth++;
		else if (*p == '}' || *p == ']')
			depth--;
		p++;
	}
	return false;
}

struct open_ctx {
	bool detect;
	uint32_t num_classes;
	label_report_fn report;
	void *report_ctx;
	char *text;
	size_t text_cap;
	int32_t max_label;
	uint64_t label_errors, label_files_missing;
};

/* Finish group g of shard `sh` (index t): add its sample, labels read. */
static int group_done(struct open_ctx *o, struct samples *s, const struct group *g, const struct shard *sh,
		      const char *shard_name, uint32_t shard, const struct tar_index *t, uint64_t max_samples,
		      struct shardset *set, char *errbuf, size_t errlen)
{
	int32_t label = 0;
	long lm;
	int r;

	if (g->image < 0) {
		set->skipped++;
		return 0;
	}
	if (s->n >= max_samples) {
		set_err(errbuf, errlen, "shards: more than %llu samples", (unsigned long long)max_samples);
		return -EFBIG;
	}
	lm = o->detect ? g->txt : g->cls >= 0 ? g->cls : g->json >= 0 ? g->json : g->txt;
	if (!o->detect) {
		bool ok;

		if (lm < 0) {
			set_err(errbuf, errlen, "shard %s: sample '%.*s' has no label (.cls, .json or .txt)", sh->loc,
				(int)g->key_len, g->key);
			return -EINVAL;
		}
		r = read_member(sh, &t->v[lm], SHARDS_MAX_LABEL_BYTES, &o->text, &o->text_cap);
		if (r < 0) {
			set_err(errbuf, errlen, "shard %s: %s: %s", sh->loc, tar_member_name(t, (size_t)lm),
				r == -EFBIG ? "too large for a label" : strerror(-r));
			return r == -ENOMEM ? r : -EINVAL;
		}
		ok = lm == g->json ? json_label(o->text, &label)
				   : parse_label(o->text, o->text + t->v[lm].size, &label);
		if (!ok) {
			set_err(errbuf, errlen, "shard %s: %s: %s", sh->loc, tar_member_name(t, (size_t)lm),
				lm == g->json ? "no integer top-level \"label\"" : "not a non-negative integer label");
			return -EINVAL;
		}
		if (label > o->max_label)
			o->max_label = label;
	}
	r = samples_add(s, shard_name, tar_member_name(t, (size_t)g->image), label, shard, &t->v[g->image]);
	if (r < 0)
		return r;
	if (o->detect) {
		char where[PATH_MAX + 64];

		r = grow((void **)&s->box_off, &s->box_cap, s->n + 1, sizeof(*s->box_off));
		if (r < 0)
			return r;
		s->box_off[s->n - 1] = s->boxes.n;
		if (lm < 0) {
			o->label_files_missing++;
			return 0;
		}
		snprintf(where, sizeof(where), "%s:%s", shard_name, tar_member_name(t, (size_t)lm));
		r = read_member(sh, &t->v[lm], LABELS_MAX_FILE_BYTES, &o->text, &o->text_cap);
		if (r < 0) {
			if (r == -ENOMEM)
				return r;
			if (o->report)
				o->report(o->report_ctx, where, 0,
					  r == -EFBIG ? "larger than 4 MiB: not a label file" : strerror(-r));
			o->label_errors++;
			return 0;
		}
		r = labels_parse(o->text, (size_t)t->v[lm].size, o->num_classes, where, o->report, o->report_ctx,
				 &s->boxes);
		if (r < 0)
			return r;
		o->label_errors += (uint64_t)r;
	}
	return 0;
}

/* The members of shard `shard` grouped into samples. */
static int group_shard(struct open_ctx *o, struct samples *s, const struct shard *sh, const char *shard_name,
		       uint32_t shard, const struct tar_index *t, uint64_t max_samples, struct shardset *set,
		       char *errbuf, size_t errlen)
{
	struct group g = {.image = -1, .cls = -1, .json = -1, .txt = -1};
	bool open_group = false;
	int r;

	for (size_t i = 0; i < t->n; i++) {
		const char *name = tar_member_name(t, i), *ext;
		size_t key_len;
		long *slot = NULL;
		bool dup = false;
		char lext[16];
		size_t el;

		if (is_meta(name) || !shards_key_split(name, &key_len, &ext))
			continue;
		if (!open_group || key_len != g.key_len || memcmp(name, g.key, key_len) != 0) {
			if (open_group) {
				r = group_done(o, s, &g, sh, shard_name, shard, t, max_samples, set, errbuf, errlen);
				if (r < 0)
					return r;
			}
			g = (struct group){.key = name,
					   .key_len = key_len,
					   .image = -1,
					   .cls = -1,
					   .json = -1,
					   .txt = -1,
					   .image_rank = (int)NIMAGE_EXTS};
			open_group = true;
		}
		el = strlen(ext);
		if (el >= sizeof(lext))
			continue; /* no extension this reads is that long */
		for (size_t k = 0; k <= el; k++)
			lext[k] = (char)(ext[k] >= 'A' && ext[k] <= 'Z' ? ext[k] + 32 : ext[k]);
		if (strcmp(lext, "cls") == 0)
			slot = &g.cls;
		else if (strcmp(lext, "json") == 0)
			slot = &g.json;
		else if (strcmp(lext, "txt") == 0)
			slot = &g.txt;
		for (int k = 0; !slot && k < (int)NIMAGE_EXTS; k++) {
			if (strcmp(lext, image_exts[k]) != 0)
				continue;
			dup = g.image_seen & 1u << k;
			g.image_seen |= 1u << k;
			if (k < g.image_rank) {
				g.image = (long)i;
				g.image_rank = k;
			}
			break;
		}
		if (slot) {
			dup = *slot >= 0;
			*slot = (long)i;
		}
		/* WebDataset refuses a key with one extension twice. */
		if (dup) {
			set_err(errbuf, errlen, "shard %s: offset %llu: %s: a second .%s in sample '%.*s'", sh->loc,
				(unsigned long long)t->v[i].offset - TAR_BLOCK, name, lext, (int)key_len, name);
			return -EINVAL;
		}
	}
	return open_group ? group_done(o, s, &g, sh, shard_name, shard, t, max_samples, set, errbuf, errlen) : 0;
}

/* The data set of the shards at `locs` (taken over and freed), read
 * through src (NULL: local files). */
static int open_locs(const char *path, struct strvec *locs_in, const char *root, const char *key,
		     const struct shard_source *src, bool detect, uint32_t num_classes, uint64_t max_samples,
		     label_report_fn report, void *report_ctx, struct shard_table *out, char *errbuf, size_t errlen)
{
	struct open_ctx o = {.detect = detect,
			     .num_classes = num_classes,
			     .report = report,
			     .report_ctx = report_ctx,
			     .max_label = -1};
	struct strvec locs = *locs_in;
	struct samples s = {0};
	struct shardset *set = NULL;
	struct shard_table tab = {0};
	size_t root_len;
	int r;

	memset(locs_in, 0, sizeof(*locs_in));
	if (locs.n == 0) {
		set_err(errbuf, errlen, "dataset %s: no shards", path);
		r = -ENOENT;
		goto fail;
	}
	root_len = strlen(root);
	set = calloc(1, sizeof(*set));
	r = -ENOMEM;
	if (!set || !(set->v = calloc(locs.n, sizeof(*set->v))) ||
	    !(set->starts = calloc(locs.n + 1, sizeof(uint64_t))))
		goto nomem;
	for (size_t i = 0; i < locs.n; i++) {
		struct tar_index t = {0};
		struct shard *sh = &set->v[i];
		const char *name;
		bool built;

		sh->loc = locs.v[i];
		sh->src = src;
		locs.v[i] = NULL;
		set->n++;
		r = shard_index(sh, &t, &built, errbuf, errlen);
		if (r < 0)
			goto fail;
		set->indexed += built;
		/* Shown, and cache-keyed, relative to the root when under it. */
		name = sh->loc;
		if (strncmp(name, root, root_len) == 0 && name[root_len] == '/')
			name += root_len + 1;
		sh->first = set->starts[i] = s.n;
		r = group_shard(&o, &s, sh, name, (uint32_t)i, &t, max_samples, set, errbuf, errlen);
		tar_index_free(&t);
		readahead_free(sh);
		if (r < 0)
			goto fail;
	}
	set->starts[set->n] = s.n;
	if (s.n == 0) {
		set_err(errbuf, errlen, "dataset %s: no samples with an image (.%s, ...) in %u shard%s", path,
			image_exts[0], set->n, set->n == 1 ? "" : "s");
		r = -ENOENT;
		goto fail;
	}
	if (detect) {
		r = grow((void **)&s.box_off, &s.box_cap, s.n + 1, sizeof(*s.box_off));
		if (r < 0)
			goto nomem;
		s.box_off[s.n] = s.boxes.n;
	}
	tab.root = strdup(root);
	tab.key = strdup(key);
	if (!tab.root || !tab.key)
		goto nomem;
	tab.count = s.n;
	tab.detect = detect;
	tab.names = s.names;
	tab.name_off = s.name_off;
	tab.labels = s.labels;
	tab.boxes = s.boxes.v;
	tab.box_off = s.box_off;
	tab.label_errors = o.label_errors;
	tab.label_files_missing = o.label_files_missing;
	if (detect) {
		tab.num_classes = num_classes;
		for (uint64_t k = 0; !num_classes && k < s.boxes.n; k++)
			if (s.boxes.v[k].cls + 1 > tab.num_classes)
				tab.num_classes = (uint32_t)s.boxes.v[k].cls + 1;
	} else {
		tab.num_classes = (uint32_t)(o.max_label + 1);
	}
	set->sample_shard = s.shard;
	set->sample_off = s.off;
	set->sample_size = s.size;
	tab.set = set;
	memset(&s, 0, sizeof(s));
	*out = tab;
	free(o.text);
	strvec_free(&locs);
	return 0;
nomem:
	r = -ENOMEM;
	set_err(errbuf, errlen, "dataset %s: out of memory", path);
fail:
	free(tab.root);
	free(tab.key);
	shardset_free(set);
	samples_free(&s);
	free(o.text);
	strvec_free(&locs);
	if (!errbuf[0])
		set_err(errbuf, errlen, "dataset %s: %s", path, strerror(-r));
	return r;
}

int shards_open(const char *path, bool detect, uint32_t num_classes, uint64_t max_samples, label_report_fn report,
		void *report_ctx, struct shard_table *out, char *errbuf, size_t errlen)
{
	struct strvec locs = {0};
	char root[PATH_MAX], key[PATH_MAX * 2];
	int r;

	errbuf[0] = '\0';
	r = resolve(path, &locs, root, key, errbuf, errlen);
	if (r < 0) {
		strvec_free(&locs);
		if (!errbuf[0])
			set_err(errbuf, errlen, "dataset %s: %s", path, strerror(-r));
		return r;
	}
	return open_locs(path, &locs, root, key, NULL, detect, num_classes, max_samples, report, report_ctx, out,
			 errbuf, errlen);
}

bool shards_url_spec(const char *url)
{
	const char *open = strchr(url, '{');

	return (open && strchr(open, '}')) || has_suffix_ci(url, ".tar");
}

int shards_open_source(const char *url, struct strvec *given, const struct shard_source *src, bool detect,
		       uint32_t num_classes, uint64_t max_samples, label_report_fn report, void *report_ctx,
		       struct shard_table *out, char *errbuf, size_t errlen)
{
	struct strvec locs = {0};
	char root[PATH_MAX], key[PATH_MAX * 2];
	const char *slash = strrchr(url, '/');
	int r;

	errbuf[0] = '\0';
	if (!slash || strlen(url) >= PATH_MAX) {
		set_err(errbuf, errlen, "dataset %s: not a shard URL", url);
		return -EINVAL;
	}
	/* Names are shown relative to the pattern's directory. */
	snprintf(root, sizeof(root), "%.*s", (int)(slash - url), url);
	snprintf(key, sizeof(key), "shards:%s", url);
	if (given) {
		locs = *given;
		memset(given, 0, sizeof(*given));
	}
	r = given ? 0 : shards_expand(url, SHARDS_MAX, &locs);
	if (r < 0) {
		strvec_free(&locs);
		set_err(errbuf, errlen, "dataset %s: %s", url, r == -E2BIG ? "too many shards" : strerror(-r));
		return r;
	}
	return open_locs(url, &locs, root, key, src, detect, num_classes, max_samples, report, report_ctx, out, errbuf,
			 errlen);
}

void shard_table_free(struct shard_table *t)
{
	if (!t)
		return;
	shardset_free(t->set);
	free(t->root);
	free(t->key);
	free(t->names);
	free(t->name_off);
	free(t->labels);
	free(t->boxes);
	free(t->box_off);
	memset(t, 0, sizeof(*t));
}

void shardset_free(struct shardset *s)
{
	if (!s)
		return;
	for (uint32_t i = 0; s->v && i < s->n; i++) {
		readahead_free(&s->v[i]);
		free(s->v[i].loc);
	}
	free(s->v);
	free(s->starts);
	free(s->sample_shard);
	free(s->sample_off);
	free(s->sample_size);
	free(s);
}

int64_t shards_read(const struct shardset *s, uint64_t index, uint8_t **buf, size_t *cap, uint64_t max_bytes)
{
	uint64_t size = s->sample_size[index];
	int r;

	if (size > max_bytes)
		return -EFBIG;
	r = grow((void **)buf, cap, size ? (size_t)size : 1, 1);
	if (r < 0)
		return r;
	r = shard_read(&s->v[s->sample_shard[index]], s->sample_off[index], *buf, (size_t)size);
	return r < 0 ? r : (int64_t)size;
}

int shards_stat(const struct shardset *s, uint64_t index, uint64_t *size, int64_t *stamp)
{
	const struct shard *sh = &s->v[s->sample_shard[index]];
	uint64_t now_size;
	int64_t now_stamp;
	int r;

	/* A remote shard is checked when it is indexed (each listing), not
	 * with a request per sample. */
	r = sh->src ? 0 : shard_stat(sh->loc, &now_size, &now_stamp);
	if (r < 0)
		return r;
	if (!sh->src && (now_size != sh->size || now_stamp != sh->stamp))
		return -ESTALE; /* not the shard indexed: its bytes are not cached */
	/* Cache keys are (name, size, stamp): the shard's stamp with the
	 * member's offset mixed in, so that two members of one name differ. */
	*size = s->sample_size[index];
	*stamp = sh->stamp ^ (int64_t)(s->sample_off[index] * 0x9E3779B97F4A7C15ull);
	return 0;
}
