/* SPDX-License-Identifier: MIT */
/*
 * Error text: the one helper that writes a failure's message into a
 * caller's buffer (the `char *errbuf, size_t errlen` parameters of
 * docs/ARCHITECTURE.md's conventions), with printf format checking.
 */
#ifndef STOKER_ERRTEXT_H
#define STOKER_ERRTEXT_H

#include <stddef.h>

/* vsnprintf into errbuf (truncated to errlen, always terminated when
 * errlen > 0; errlen 0 writes nothing). */
void set_err(char *errbuf, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
