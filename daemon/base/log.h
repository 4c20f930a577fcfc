/* SPDX-License-Identifier: MIT */
/*
 * The daemon's one log path. Lines go to stderr; under systemd (when
 * $JOURNAL_STREAM names our stderr) each line carries a <N> priority prefix
 * so journald files it at the right level. Safe from any thread: one write(2)
 * a line.
 */
#ifndef STOKER_LOG_H
#define STOKER_LOG_H

#include <stdarg.h>
#include <stdbool.h>

enum log_level {
	LOG_LVL_ERR = 3,
	LOG_LVL_WARNING = 4,
	LOG_LVL_NOTICE = 5,
	LOG_LVL_INFO = 6,
	LOG_LVL_DEBUG = 7,
};

void log_setup(enum log_level max_level);
void log_set_level(enum log_level max_level);
/* -EINVAL for an unknown name; names: err warning notice info debug. */
int log_level_from_string(const char *s, enum log_level *out);
const char *log_level_name(enum log_level level);
bool log_enabled(enum log_level level);

__attribute__((format(printf, 2, 3))) void log_msg(enum log_level level, const char *fmt, ...);
/* log_msg with `prefix` written before the message: the one place a line's
 * context is put in front of it (a connection's, loop/server.c's conn_log). */
__attribute__((format(printf, 3, 0))) void log_vmsg(enum log_level level, const char *prefix, const char *fmt,
						    va_list ap);

#define log_error(...) log_msg(LOG_LVL_ERR, __VA_ARGS__)
#define log_warning(...) log_msg(LOG_LVL_WARNING, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_LVL_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LVL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LVL_DEBUG, __VA_ARGS__)

#endif
