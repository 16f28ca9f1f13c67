/*
 * rubick_spank.c - SPANK plugin adding `--model-type=NAME` to sbatch, salloc
 * and srun for the Rubick scheduler.
 *
 * plugstack.conf:
 *   optional /usr/lib/x86_64-linux-gnu/slurm-wlm/rubick_spank.so [models=/etc/rubick/model-types]
 *
 * Submit side (allocator context: sbatch/salloc, local context: srun): the
 * name is checked against the syntax [a-z0-9][a-z0-9._-]{0,63} and, when
 * models= is given and a new job is being submitted, against that list; then
 * RUBICK_MODEL_TYPE=NAME is put in the job control environment, which
 * reaches slurmctld as job_desc.spank_job_env, where job_submit.lua tags and
 * holds the job.
 *
 * Compute side (remote context: slurmstepd): RUBICK_MODEL_TYPE is exported
 * to the tasks so that rubick-srun and the training script can read it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/spank.h>

#include "model_types.h"

SPANK_PLUGIN(rubick, 1);

#define ENV_NAME "RUBICK_MODEL_TYPE"
/* How Slurm passes the option on in a job's environment, read back as the
 * option by any sbatch or salloc run inside the job. */
#define INHERITED_OPTION "SLURM_SPANK__SLURM_SPANK_OPTION_rubick_model_type"

static char *model_type;
static struct rubick_models models;
static int have_models;
/* Non-empty when the plugin arguments or the list are broken: --model-type
 * is then refused (fail closed), while jobs without it are unaffected. */
static char config_error[512];

static int opt_model_type(int val, const char *optarg, int remote);

static struct spank_option model_type_option = {
	"model-type", "NAME",
	"Model type of this training job, used by the Rubick scheduler "
	"to choose its resources and execution plan.",
	1, 0, opt_model_type
};

/*
 * submits_job tells whether this process may create a job: sbatch and salloc
 * always, srun only outside an allocation. srun inside a job re-applies the
 * job's option from its environment; that value was checked when the job was
 * submitted, and the list may have changed since or be absent on compute
 * nodes, so only the syntax is checked there (and in slurmstepd).
 */
static int submits_job(int remote)
{
	spank_context_t ctx = spank_context();

	if (remote)
		return 0;
	if (ctx == S_CTX_ALLOCATOR)
		return 1;
	return ctx == S_CTX_LOCAL && getenv("SLURM_JOB_ID") == NULL;
}

static int opt_model_type(int val, const char *optarg, int remote)
{
	char err[256];
	const struct rubick_models *list = NULL;

	(void) val;
	if (submits_job(remote)) {
		if (config_error[0] != '\0') {
			slurm_error("rubick: --model-type is unavailable: %s",
				    config_error);
			return ESPANK_ERROR;
		}
		if (have_models)
			list = &models;
	}
	if (rubick_validate(list, optarg, err, sizeof(err)) != 0) {
		slurm_error("rubick: %s", err);
		return ESPANK_BAD_ARG;
	}
	free(model_type);
	model_type = strdup(optarg);
	if (model_type == NULL) {
		slurm_error("rubick: out of memory");
		return ESPANK_ERROR;
	}
	return ESPANK_SUCCESS;
}

static void parse_args(int ac, char **av)
{
	int i;

	for (i = 0; i < ac; i++) {
		if (strncmp(av[i], "models=", 7) == 0) {
			if (have_models)
				rubick_models_free(&models);
			have_models = 0;
			/* An absent list lets any well-formed name go. */
			if (rubick_models_load(av[i] + 7, &models, config_error,
					       sizeof(config_error)) == 0)
				have_models = 1;
		} else {
			snprintf(config_error, sizeof(config_error),
				 "unknown plugin argument '%s'", av[i]);
		}
		if (config_error[0] != '\0')
			return;
	}
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	spank_err_t rc;

	if (ctx != S_CTX_LOCAL && ctx != S_CTX_ALLOCATOR &&
	    ctx != S_CTX_REMOTE)
		return ESPANK_SUCCESS;
	/* An sbatch or salloc run inside a job submits a job of its own:
	 * without --model-type it is no job of that model type (an
	 * evaluation, a follow-up), and once the name left the list the
	 * inherited one failed every such submission. */
	if (ctx == S_CTX_ALLOCATOR)
		unsetenv(INHERITED_OPTION);
	/* Register dynamically: sbatch and salloc ignore a static
	 * spank_options[] table (Slurm 22.05 plugstack.c). */
	rc = spank_option_register(sp, &model_type_option);
	if (rc != ESPANK_SUCCESS) {
		slurm_error("rubick: cannot register --model-type: %s",
			    spank_strerror(rc));
		return rc;
	}
	if (submits_job(ctx == S_CTX_REMOTE)) {
		parse_args(ac, av);
		if (config_error[0] != '\0')
			slurm_verbose("rubick: %s", config_error);
	}
	return ESPANK_SUCCESS;
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	spank_context_t ctx = spank_context();
	spank_err_t rc = ESPANK_SUCCESS;

	(void) ac;
	(void) av;
	if (model_type == NULL)
		return ESPANK_SUCCESS;
	if (ctx == S_CTX_ALLOCATOR || ctx == S_CTX_LOCAL) {
		/* An error fails the submission only for a plugin the
		 * plugstack line marks required; under the shipped optional
		 * line Slurm goes on, and the job, untagged, runs as a plain
		 * Slurm job: said here, in slurmd's or the client's log. */
		rc = spank_job_control_setenv(sp, ENV_NAME, model_type, 1);
		if (rc != ESPANK_SUCCESS)
			slurm_error("rubick: cannot pass --model-type to "
				    "slurmctld: %s", spank_strerror(rc));
	} else if (ctx == S_CTX_REMOTE) {
		rc = spank_setenv(sp, ENV_NAME, model_type, 1);
		if (rc != ESPANK_SUCCESS)
			slurm_error("rubick: cannot set %s: %s", ENV_NAME,
				    spank_strerror(rc));
	}
	return rc == ESPANK_SUCCESS ? ESPANK_SUCCESS : -1;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	(void) sp;
	(void) ac;
	(void) av;
	free(model_type);
	model_type = NULL;
	if (have_models)
		rubick_models_free(&models);
	have_models = 0;
	return ESPANK_SUCCESS;
}
