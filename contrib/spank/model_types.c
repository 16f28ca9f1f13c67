/*
 * model_types.c - validation of Rubick model type names (no Slurm dependency).
 */
#include "model_types.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_first(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

static int is_rest(int c)
{
	return is_first(c) || c == '.' || c == '_' || c == '-';
}

int rubick_name_syntax_ok(const char *name)
{
	size_t i;

	if (name == NULL || !is_first((unsigned char) name[0]))
		return 0;
	for (i = 1; name[i] != '\0'; i++) {
		if (i >= RUBICK_NAME_MAX || !is_rest((unsigned char) name[i]))
			return 0;
	}
	return 1;
}

static int models_add(struct rubick_models *m, const char *name)
{
	char *dup;

	if (m->count == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 16;
		char **names = realloc(m->names, cap * sizeof(*names));

		if (names == NULL)
			return -1;
		m->names = names;
		m->cap = cap;
	}
	dup = strdup(name);
	if (dup == NULL)
		return -1;
	m->names[m->count++] = dup;
	return 0;
}

void rubick_models_free(struct rubick_models *m)
{
	size_t i;

	for (i = 0; i < m->count; i++)
		free(m->names[i]);
	free(m->names);
	m->names = NULL;
	m->count = 0;
	m->cap = 0;
}

static char *trim(char *s)
{
	char *end;

	while (*s == ' ' || *s == '\t')
		s++;
	end = s + strlen(s);
	while (end > s && (end[-1] == ' ' || end[-1] == '\t' ||
			   end[-1] == '\n' || end[-1] == '\r'))
		end--;
	*end = '\0';
	return s;
}

int rubick_models_load(const char *path, struct rubick_models *m,
		       char *err, size_t errlen)
{
	/* Far longer than a name (RUBICK_NAME_MAX): a longer line is read
	 * to its end and kept only up to a '#' in its first part (a long
	 * comment); with none, it is an error, never split into names. */
	char line[256];
	unsigned lineno = 0;
	FILE *f;

	m->names = NULL;
	m->count = 0;
	m->cap = 0;

	f = fopen(path, "re");
	if (f == NULL && errno == ENOENT)
		return RUBICK_MODELS_ABSENT;
	if (f == NULL) {
		snprintf(err, errlen, "cannot open model type list %s: %s",
			 path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		char *hash, *name;

		int truncated = 0;

		lineno++;
		if (strchr(line, '\n') == NULL && !feof(f)) {
			int c;

			truncated = 1;
			while ((c = fgetc(f)) != EOF && c != '\n')
				;
		}
		hash = strchr(line, '#');
		if (hash != NULL) {
			*hash = '\0';
		} else if (truncated) {
			snprintf(err, errlen, "%s:%u: line too long", path,
				 lineno);
			goto fail;
		}
		name = trim(line);
		if (*name == '\0')
			continue;
		if (!rubick_name_syntax_ok(name)) {
			snprintf(err, errlen,
				 "%s:%u: invalid model type name '%s'", path,
				 lineno, name);
			goto fail;
		}
		if (models_add(m, name) != 0) {
			snprintf(err, errlen, "%s: out of memory", path);
			goto fail;
		}
	}
	if (ferror(f)) {
		snprintf(err, errlen, "error reading %s", path);
		goto fail;
	}
	fclose(f);
	return 0;
fail:
	fclose(f);
	rubick_models_free(m);
	return -1;
}

int rubick_validate(const struct rubick_models *models, const char *name,
		    char *err, size_t errlen)
{
	size_t i;

	if (name == NULL || *name == '\0') {
		snprintf(err, errlen, "--model-type needs a NAME");
		return -1;
	}
	if (!rubick_name_syntax_ok(name)) {
		snprintf(err, errlen,
			 "invalid --model-type '%.80s': use 1-%d characters "
			 "of a-z 0-9 . _ -, starting with a letter or digit",
			 name, RUBICK_NAME_MAX);
		return -1;
	}
	if (models == NULL)
		return 0;
	for (i = 0; i < models->count; i++) {
		if (strcmp(models->names[i], name) == 0)
			return 0;
	}
	snprintf(err, errlen,
		 "unknown --model-type '%s': not in the site's list of "
		 "model types", name);
	return -1;
}
