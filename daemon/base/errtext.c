/* SPDX-License-Identifier: MIT */
#include "errtext.h"

#include <stdarg.h>
#include <stdio.h>

void set_err(char *errbuf, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(errbuf, errlen, fmt, ap);
	va_end(ap);
}
