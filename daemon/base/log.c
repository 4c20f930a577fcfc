/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"

static _Atomic int log_max = LOG_LVL_INFO;
static bool log_prefix_priority;

static const char *const level_names[] = {
	[LOG_LVL_ERR] = "err",   [LOG_LVL_WARNING] = "warning", [LOG_LVL_NOTICE] = "notice",
	[LOG_LVL_INFO] = "info", [LOG_LVL_DEBUG] = "debug",
};

/* journald sets JOURNAL_STREAM=dev:ino of the stream it gave us. */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) < 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_setup(enum log_level max_level)
{
	log_prefix_priority = stderr_is_journal();
	log_set_level(max_level);
}

void log_set_level(enum log_level max_level)
{
	atomic_store(&log_max, (int)max_level);
}

int log_level_from_string(const char *s, enum log_level *out)
{
	for (int i = LOG_LVL_ERR; i <= LOG_LVL_DEBUG; i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *log_level_name(enum log_level level)
{
	return level >= LOG_LVL_ERR && level <= LOG_LVL_DEBUG ? level_names[level] : "?";
}

bool log_enabled(enum log_level level)
{
	return (int)level <= atomic_load(&log_max);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vmsg(level, "", fmt, ap);
	va_end(ap);
}

void log_vmsg(enum log_level level, const char *prefix, const char *fmt, va_list ap)
{
	char line[2048];
	size_t n = 0;
	int r;

	if (!log_enabled(level))
		return;
	if (log_prefix_priority)
		n = (size_t)snprintf(line, sizeof(line), "<%d>%s", (int)level, prefix);
	else
		n = (size_t)snprintf(line, sizeof(line), "stokerd: %s: %s", level_names[level], prefix);
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	r = vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	if (r < 0)
		return;
	n += (size_t)r;
	if (n > sizeof(line) - 2)
		n = sizeof(line) - 2;
	line[n++] = '\n';
	/* One write a line keeps lines whole across threads. */
	if (write(STDERR_FILENO, line, n) < 0)
		return;
}
