/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errtext.h"
#include "grow.h"
#include "tar.h"

/* Among small members, headers are read through a window this large (one
 * read covers many); after a large member, one block is read, so that
 * indexing reads little more than the headers. */
#define TAR_WINDOW (64u << 10)
#define TAR_SMALL (4u << 10)

struct reader {
	tar_read_fn read;
	void *ctx;
	uint64_t size;
	uint8_t *win;
	uint64_t win_off;
	size_t win_len;
	unsigned small_run; /* consecutive members of at most TAR_SMALL */
};

/* The block at off, through the window; -EBADMSG when cut short. */
static int block_at(struct reader *rd, uint64_t off, const uint8_t **out)
{
	if (off + TAR_BLOCK > rd->size)
		return -EBADMSG;
	if (off < rd->win_off || off + TAR_BLOCK > rd->win_off + rd->win_len) {
		uint64_t want = rd->small_run >= 2 ? TAR_WINDOW : TAR_BLOCK;

		if (want > rd->size - off)
			want = rd->size - off;
		int64_t n = rd->read(rd->ctx, off, rd->win, (size_t)want);

		if (n < 0)
			return (int)n;
		rd->win_off = off;
		rd->win_len = (size_t)n;
		if ((size_t)n < TAR_BLOCK)
			return -EBADMSG; /* the archive shrank under us */
	}
	*out = rd->win + (off - rd->win_off);
	return 0;
}

/* A numeric field: octal text (leading spaces, ending at NUL or space) or
 * GNU base-256 (high bit of the first byte; negative values refused). */
static int parse_number(const uint8_t *f, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] & 0x80) {
		if (f[0] & 0x40)
			return -EBADMSG; /* negative */
		v = f[0] & 0x3f;
		for (i = 1; i < len; i++) {
			if (v >> 55)
				return -EBADMSG;
			v = v << 8 | f[i];
		}
		*out = v;
		return 0;
	}
	while (i < len && f[i] == ' ')
		i++;
	for (; i < len && f[i] != '\0' && f[i] != ' '; i++) {
		if (f[i] < '0' || f[i] > '7' || v >> 60)
			return -EBADMSG;
		v = v * 8 + (uint64_t)(f[i] - '0');
	}
	for (; i < len; i++) /* only terminators may follow */
		if (f[i] != '\0' && f[i] != ' ')
			return -EBADMSG;
	*out = v;
	return 0;
}

static bool checksum_ok(const uint8_t *h)
{
	uint64_t want;
	unsigned long usum = 0;
	long ssum = 0;

	if (parse_number(h + 148, 8, &want) < 0)
		return false;
	for (int i = 0; i < TAR_BLOCK; i++) {
		uint8_t c = i >= 148 && i < 156 ? ' ' : h[i];

		usum += c;
		ssum += (signed char)c;
	}
	/* Some old tars summed signed chars; GNU tar and tarfile accept both. */
	return want == usum || (long)want == ssum;
}

static bool all_zero(const uint8_t *h)
{
	for (int i = 0; i < TAR_BLOCK; i++)
		if (h[i])
			return false;
	return true;
}

/* Read a meta member's data (long name, pax header) of `len` bytes. */
static int read_meta(struct reader *rd, uint64_t off, size_t len, char **buf, size_t *cap)
{
	int64_t n;
	int r = grow((void **)buf, cap, len + 1, 1);

	if (r < 0)
		return r;
	n = len ? rd->read(rd->ctx, off, *buf, len) : 0;
	if (n < 0)
		return (int)n;
	if ((size_t)n != len)
		return -EBADMSG;
	(*buf)[len] = '\0';
	return 0;
}

/* The pax records "LEN key=value\n" that matter here: path and size. */
static int parse_pax(const char *p, size_t len, char *path, size_t *path_len, uint64_t *size, bool *has_size,
		     const char **why)
{
	size_t pos = 0;

	while (pos < len) {
		size_t rec = 0, i = pos;
		const char *key, *eq, *val, *end;

		while (i < len && p[i] >= '0' && p[i] <= '9' && rec <= len)
			rec = rec * 10 + (size_t)(p[i++] - '0');
		if (i == pos || i >= len || p[i] != ' ' || rec > len - pos || rec < i - pos + 3 ||
		    p[pos + rec - 1] != '\n') {
			*why = "malformed pax record";
			return -EBADMSG;
		}
		key = p + i + 1;
		end = p + pos + rec - 1;
		eq = memchr(key, '=', (size_t)(end - key));
		if (!eq) {
			*why = "pax record without '='";
			return -EBADMSG;
		}
		val = eq + 1;
		if ((size_t)(eq - key) == 4 && memcmp(key, "path", 4) == 0) {
			size_t vl = (size_t)(end - val);

			if (vl == 0 || vl >= TAR_MAX_NAME || memchr(val, '\0', vl)) {
				*why = "pax path empty, too long or holding a NUL";
				return -EBADMSG;
			}
			memcpy(path, val, vl);
			path[vl] = '\0';
			*path_len = vl;
		} else if ((size_t)(eq - key) == 4 && memcmp(key, "size", 4) == 0) {
			uint64_t v = 0;

			if (val == end) {
				*why = "pax size empty";
				return -EBADMSG;
			}
			for (const char *c = val; c < end; c++) {
				if (*c < '0' || *c > '9' || v > (UINT64_MAX >> 4) / 10) {
					*why = "pax size not a number";
					return -EBADMSG;
				}
				v = v * 10 + (uint64_t)(*c - '0');
			}
			*size = v;
			*has_size = true;
		}
		pos += rec;
	}
	return 0;
}

int tar_index_add(struct tar_index *t, const char *name, size_t name_len, uint64_t offset, uint64_t size)
{
	int r;

	if (t->n == t->cap) {
		r = grow((void **)&t->v, &t->cap, t->cap ? 2 * t->cap : 256, sizeof(*t->v));
		if (r < 0)
			return r;
	}
	if (t->names_len + name_len + 1 > t->names_cap) {
		size_t cap = t->names_cap ? t->names_cap : 4096;

		while (cap < t->names_len + name_len + 1)
			cap *= 2;
		r = grow((void **)&t->names, &t->names_cap, cap, 1);
		if (r < 0)
			return r;
	}
	memcpy(t->names + t->names_len, name, name_len);
	t->names[t->names_len + name_len] = '\0';
	t->v[t->n++] = (struct tar_member){.name_off = t->names_len, .offset = offset, .size = size};
	t->names_len += name_len + 1;
	return 0;
}

void tar_index_free(struct tar_index *t)
{
	if (!t)
		return;
	free(t->v);
	free(t->names);
	memset(t, 0, sizeof(*t));
}

static size_t field_len(const uint8_t *f, size_t max)
{
	const uint8_t *z = memchr(f, '\0', max);

	return z ? (size_t)(z - f) : max;
}

int tar_index_build(tar_read_fn read, void *ctx, uint64_t size, uint64_t max_members, struct tar_index *out,
		    uint64_t *err_off, char *why, size_t whylen)
{
	struct reader rd = {.read = read, .ctx = ctx, .size = size};
	struct tar_index t = {0};
	char *meta = NULL, *name = NULL;
	size_t meta_cap = 0, name_len = 0;
	bool has_name = false, has_size = false;
	uint64_t off = 0, pax_size = 0, meta_off = 0;
	const char *reason = NULL;
	int r = 0;

	rd.win = malloc(TAR_WINDOW);
	name = malloc(TAR_MAX_NAME);
	if (!rd.win || !name) {
		r = -ENOMEM;
		goto out;
	}
	while (off < size) {
		const uint8_t *h = NULL;
		uint64_t msize, data, next;
		char type;

		r = block_at(&rd, off, &h);
		if (r < 0) {
			reason = "header cut short (truncated archive)";
			goto out;
		}
		if (all_zero(h))
			break; /* end-of-archive marker */
		if (!checksum_ok(h)) {
			reason = "bad header checksum (not a tar archive, or corrupt)";
			r = -EBADMSG;
			goto out;
		}
		if (parse_number(h + 124, 12, &msize) < 0) {
			reason = "bad size field";
			r = -EBADMSG;
			goto out;
		}
		type = (char)h[156];
		if (type == 'x' || type == 'L' || type == 'K' || type == 'g') {
			if (msize > (type == 'L' ? TAR_MAX_NAME : TAR_MAX_PAX)) {
				reason = type == 'L' ? "GNU long name too long" : "pax header too large";
				r = -EBADMSG;
				goto out;
			}
		} else if (has_size) {
			msize = pax_size;
		}
		data = off + TAR_BLOCK;
		/* Links, directories, devices and FIFOs carry no data in tar,
		 * whatever their size field says (as tarfile reads them). */
		if (type >= '1' && type <= '6')
			msize = 0;
		if (msize > size - data) {
			reason = "member data runs past the end (truncated archive)";
			r = -EBADMSG;
			goto out;
		}
		next = data + (msize + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
		if (type == 'L' || type == 'x')
			meta_off = off; /* where an extended header with no member began */
		if (type == 'L') {
			r = read_meta(&rd, data, (size_t)msize, &meta, &meta_cap);
			if (r < 0) {
				reason = "GNU long name cut short";
				goto out;
			}
			name_len = strlen(meta); /* up to its NUL, as GNU tar */
			if (name_len == 0 || name_len >= TAR_MAX_NAME) {
				reason = "empty GNU long name";
				r = -EBADMSG;
				goto out;
			}
			memcpy(name, meta, name_len + 1);
			has_name = true;
		} else if (type == 'x') {
			r = read_meta(&rd, data, (size_t)msize, &meta, &meta_cap);
			if (r < 0) {
				reason = "pax header cut short";
				goto out;
			}
			r = parse_pax(meta, (size_t)msize, name, &name_len, &pax_size, &has_size, &reason);
			if (r < 0)
				goto out;
			has_name = has_name || name_len > 0;
		} else if (type == 'K' || type == 'g') {
			/* a long link target; global pax records: nothing we use */
		} else {
			bool regular = type == '0' || type == '7' || type == '\0';

			if (!has_name) {
				size_t nl = field_len(h, 100), pl = 0;

				/* POSIX ustar: a prefix joined with '/'. */
				if (memcmp(h + 257, "ustar\0", 6) == 0)
					pl = field_len(h + 345, 155);
				if (pl) {
					memcpy(name, h + 345, pl);
					name[pl] = '/';
				}
				memcpy(name + (pl ? pl + 1 : 0), h, nl);
				name_len = nl + (pl ? pl + 1 : 0);
				name[name_len] = '\0';
			}
			if (type == '\0' && name_len && name[name_len - 1] == '/')
				regular = false; /* an old-style directory */
			if (regular && name_len) {
				if (t.n >= max_members) {
					reason = "too many members";
					r = -EFBIG;
					goto out;
				}
				r = tar_index_add(&t, name, name_len, data, msize);
				if (r < 0)
					goto out;
			}
			has_name = has_size = false;
			name_len = 0;
		}
		rd.small_run = next - off <= TAR_SMALL + TAR_BLOCK ? rd.small_run + 1 : 0;
		off = next;
	}
	if (has_name || has_size) {
		reason = "extended header with no member after it (truncated archive)";
		off = meta_off;
		r = -EBADMSG;
		goto out;
	}
	*out = t;
	memset(&t, 0, sizeof(t));
	r = 0;
out:
	if (r < 0) {
		*err_off = off;
		set_err(why, whylen, "%s", reason ? reason : strerror(-r));
	}
	tar_index_free(&t);
	free(rd.win);
	free(meta);
	free(name);
	return r;
}
