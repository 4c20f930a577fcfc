/* SPDX-License-Identifier: MIT */
/* Lines of the text files the daemon reads (list files, INI and YAML). */
#ifndef STOKER_TEXT_H
#define STOKER_TEXT_H

#include <stddef.h>
#include <string.h>

static inline int text_blank_or_eol(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* The n bytes at s with their trailing blanks and line ends cut off (in
 * place) and their leading blanks (space, tab) skipped. */
static inline char *text_trim_n(char *s, size_t n)
{
	char *end = s + n;

	while (end > s && text_blank_or_eol(end[-1]))
		*--end = '\0';
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* The string s, trimmed as text_trim_n() does. */
static inline char *text_trim(char *s)
{
	return text_trim_n(s, strlen(s));
}

/* The entry of a list file's line (as getline() read it, n bytes):
 * trimmed; NULL for a blank line or a '#' comment. */
static inline char *text_list_entry(char *line, size_t n)
{
	char *p = text_trim_n(line, n);

	return *p && *p != '#' ? p : NULL;
}

#endif
