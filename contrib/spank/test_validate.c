/*
 * test_validate.c - unit test of the model type validator (model_types.c).
 * Needs only a C compiler: `make test`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_types.h"

static int failures;

#define CHECK(cond, ...)                                              \
	do {                                                          \
		if (!(cond)) {                                        \
			failures++;                                   \
			fprintf(stderr, "%s:%d: FAIL: ", __FILE__,    \
				__LINE__);                            \
			fprintf(stderr, __VA_ARGS__);                 \
			fputc('\n', stderr);                          \
		}                                                     \
	} while (0)

static void test_syntax(void)
{
	static const struct {
		const char *name;
		int ok;
	} cases[] = {
		{ "gpt2", 1 },
		{ "llama-7b", 1 },
		{ "bert.large_v2", 1 },
		{ "0", 1 },
		{ "t5", 1 },
		{ "", 0 },
		{ "-gpt", 0 },
		{ ".gpt", 0 },
		{ "_gpt", 0 },
		{ "GPT2", 0 },
		{ "bad name!", 0 },
		{ "a;b", 0 },
		{ "a=b", 0 },
		{ "a/b", 0 },
		{ "gpt2\n", 0 },
		{ "caf\xc3\xa9", 0 },
		/* 64 characters: the longest accepted name. */
		{ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 1 },
		/* 65 characters. */
		{ "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0 },
	};
	size_t i;

	CHECK(!rubick_name_syntax_ok(NULL), "NULL accepted");
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		CHECK(rubick_name_syntax_ok(cases[i].name) == cases[i].ok,
		      "syntax(\"%s\") = %d, want %d", cases[i].name,
		      !cases[i].ok, cases[i].ok);
}

static char *write_temp(const char *content)
{
	static char path[64];
	FILE *f;
	int fd;

	strcpy(path, "/tmp/rubick-test-models-XXXXXX");
	fd = mkstemp(path);
	if (fd < 0 || (f = fdopen(fd, "w")) == NULL) {
		perror("mkstemp");
		exit(2);
	}
	fputs(content, f);
	fclose(f);
	return path;
}

static void test_list(void)
{
	struct rubick_models m;
	char err[256];
	char *path;

	path = write_temp("# site model types\n"
			  "gpt2\n"
			  "  bert  # trailing comment\n"
			  "\n"
			  "\tllama-7b\r\n"
			  "#vit\n"
			  "t5");
	CHECK(rubick_models_load(path, &m, err, sizeof(err)) == 0,
	      "load: %s", err);
	CHECK(m.count == 4, "count = %zu, want 4", m.count);
	CHECK(rubick_validate(&m, "gpt2", err, sizeof(err)) == 0, "gpt2: %s",
	      err);
	CHECK(rubick_validate(&m, "bert", err, sizeof(err)) == 0, "bert: %s",
	      err);
	CHECK(rubick_validate(&m, "llama-7b", err, sizeof(err)) == 0,
	      "llama-7b: %s", err);
	CHECK(rubick_validate(&m, "t5", err, sizeof(err)) == 0,
	      "t5 (no final newline): %s", err);
	CHECK(rubick_validate(&m, "vit", err, sizeof(err)) != 0,
	      "commented-out vit accepted");
	CHECK(strstr(err, "unknown --model-type 'vit'") != NULL,
	      "unexpected message: %s", err);
	CHECK(rubick_validate(&m, "bad name!", err, sizeof(err)) != 0,
	      "bad name accepted");
	CHECK(strstr(err, "invalid --model-type") != NULL,
	      "unexpected message: %s", err);
	rubick_models_free(&m);
	CHECK(m.count == 0 && m.names == NULL, "free left entries");
	unlink(path);

	/* A broken list is an error, never a silently shorter list. */
	path = write_temp("gpt2\nBad Name\n");
	CHECK(rubick_models_load(path, &m, err, sizeof(err)) != 0,
	      "invalid entry accepted");
	CHECK(strstr(err, ":2: invalid model type name 'Bad Name'") != NULL,
	      "unexpected message: %s", err);
	CHECK(m.count == 0, "failed load left %zu entries", m.count);
	unlink(path);

	/* An absent list is no list (before, it refused every name). */
	err[0] = '\0';
	CHECK(rubick_models_load("/nonexistent-rubick-models", &m, err,
				 sizeof(err)) == RUBICK_MODELS_ABSENT,
	      "absent file not reported as absent: %s", err);
	CHECK(m.count == 0 && err[0] == '\0', "absent file: %zu names, %s",
	      (size_t)m.count, err);
	/* A list that cannot be opened otherwise is an error. */
	CHECK(rubick_models_load("/proc/self/mem/x", &m, err,
				 sizeof(err)) < 0,
	      "unopenable file accepted");
	CHECK(strstr(err, "cannot open") != NULL, "unexpected message: %s",
	      err);

	/* An empty list is valid and accepts nothing. */
	path = write_temp("# nothing yet\n");
	CHECK(rubick_models_load(path, &m, err, sizeof(err)) == 0, "load: %s",
	      err);
	CHECK(rubick_validate(&m, "gpt2", err, sizeof(err)) != 0,
	      "empty list accepted gpt2");
	rubick_models_free(&m);
	unlink(path);

	/* Longer than the line buffer: rejected, not split into names. */
	{
		char big[600];

		memset(big, 'a', sizeof(big) - 2);
		big[sizeof(big) - 2] = '\n';
		big[sizeof(big) - 1] = '\0';
		path = write_temp(big);
		CHECK(rubick_models_load(path, &m, err, sizeof(err)) != 0,
		      "over-long line accepted");
		CHECK(strstr(err, "line too long") != NULL,
		      "unexpected message: %s", err);
		unlink(path);

		/* A long comment is a comment, and the names after it count. */
		memset(big, '-', sizeof(big));
		memcpy(big, "gpt2 # ", 7);
		memcpy(big + sizeof(big) - 7, "\nbert\n", 7);
		big[sizeof(big) - 1] = '\0';
		path = write_temp(big);
		CHECK(rubick_models_load(path, &m, err, sizeof(err)) == 0,
		      "long comment: %s", err);
		CHECK(m.count == 2, "long comment: count = %zu, want 2",
		      m.count);
		CHECK(rubick_validate(&m, "bert", err, sizeof(err)) == 0,
		      "bert after a long comment: %s", err);
		rubick_models_free(&m);
		unlink(path);
	}
}

static void test_without_list(void)
{
	char err[256];

	CHECK(rubick_validate(NULL, "anything-goes.v2", err, sizeof(err)) == 0,
	      "no list: %s", err);
	CHECK(rubick_validate(NULL, "", err, sizeof(err)) != 0,
	      "empty name accepted");
	CHECK(rubick_validate(NULL, NULL, err, sizeof(err)) != 0,
	      "NULL name accepted");
}

int main(void)
{
	test_syntax();
	test_list();
	test_without_list();
	if (failures) {
		fprintf(stderr, "test_validate: %d failure(s)\n", failures);
		return 1;
	}
	printf("test_validate: ok\n");
	return 0;
}
