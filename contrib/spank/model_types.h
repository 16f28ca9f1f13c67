/*
 * model_types.h - validation of Rubick model type names.
 *
 * Kept free of any Slurm dependency so that it can be unit tested with a
 * plain C compiler (see test_validate.c).
 */
#ifndef RUBICK_MODEL_TYPES_H
#define RUBICK_MODEL_TYPES_H

#include <stddef.h>

/* Longest accepted name, in bytes (without the terminating NUL). */
#define RUBICK_NAME_MAX 64

/* An admin-provided allow-list of model type names. */
struct rubick_models {
	char **names;
	size_t count;
	size_t cap;
};

/*
 * rubick_name_syntax_ok returns 1 when name matches [a-z0-9][a-z0-9._-]{0,63}.
 * The characters are restricted because the name is embedded in the job's
 * AdminComment ("rubick:v1 model=NAME ...") where spaces and ';' separate
 * fields.
 */
int rubick_name_syntax_ok(const char *name);

/*
 * rubick_models_load reads a list file: one name per line, '#' starts a
 * comment, surrounding blanks are ignored. Every name must pass
 * rubick_name_syntax_ok. Returns 0 on success; RUBICK_MODELS_ABSENT, with m
 * empty and err untouched, when the file does not exist (no list: any
 * well-formed name goes, as job_submit.lua has it); on failure returns -1,
 * leaves m empty and writes a message into err.
 */
#define RUBICK_MODELS_ABSENT 1
int rubick_models_load(const char *path, struct rubick_models *m,
		       char *err, size_t errlen);

/* rubick_models_free releases the names; m may then be reused. */
void rubick_models_free(struct rubick_models *m);

/*
 * rubick_validate checks name against the syntax and, when models is not
 * NULL, against the list. Returns 0 when valid; otherwise -1 with a message
 * for the user in err.
 */
int rubick_validate(const struct rubick_models *models, const char *name,
		    char *err, size_t errlen);

#endif /* RUBICK_MODEL_TYPES_H */
